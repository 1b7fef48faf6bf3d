package compilertest

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// Corpus loads the shared corpus for a test, or skips the test when the
// corpus is absent (as in a user's clone) or in -short mode.
func Corpus(t testing.TB) []fixtures.CorpusFile {
	t.Helper()
	if testing.Short() {
		t.Skip("corpus skipped in -short mode")
	}
	dir, ok := fixtures.CorpusDir()
	if !ok {
		t.Skip("shared corpus not found (../shared/corpus)")
	}
	files, err := fixtures.LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}
