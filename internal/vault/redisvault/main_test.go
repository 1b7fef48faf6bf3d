//go:build unix

package redisvault

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// The outage tests make go-redis's process-wide logger report every refused
// dial on stderr; the Store's own errors are what the tests check.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}
