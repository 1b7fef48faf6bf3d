package redisvault

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoBadger: a gateway that keeps its vault in Redis links no Badger.
// The Badger store is a peer package (vault/badgervault), not a
// dependency of the contract both backends implement.
func TestNoBadger(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/dgraph-io/badger") || strings.HasSuffix(p, "/internal/vault/badgervault") {
			t.Errorf("the Redis vault depends on %s", p)
		}
	}
}
