package compilertest

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// The corpus loader lives in internal/fixtures (no testing import, so the
// replay tool can use it); these names keep tests unchanged.
type (
	CorpusRequest = fixtures.CorpusRequest
	CorpusFile    = fixtures.CorpusFile
)

// CorpusDir is fixtures.CorpusDir.
func CorpusDir() (string, bool) { return fixtures.CorpusDir() }

// LoadCorpus is fixtures.LoadCorpus.
func LoadCorpus(dir string) ([]CorpusFile, error) { return fixtures.LoadCorpus(dir) }

// Corpus loads the shared corpus for a test, or skips the test when the
// corpus is absent (as in a user's clone) or in -short mode.
func Corpus(t testing.TB) []CorpusFile {
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
