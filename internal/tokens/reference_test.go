package tokens

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// reference.json holds counts by the official tiktoken (npm), produced by
// testdata/gen_reference.mjs; the command is in that file's header.
type reference struct {
	Generator string
	Strings   []refText
	Bodies    []refText
	Corpus    []struct {
		File   string
		SHA256 string
		Counts map[string]int
	}
}

type refText struct {
	Text   string
	Counts map[string]int
}

func loadReference(t *testing.T) reference {
	t.Helper()
	b, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Strings) == 0 || len(ref.Bodies) == 0 {
		t.Fatal("empty reference")
	}
	return ref
}

// TestReference: the direct count, the composed count (cut everywhere
// allowed) and the Counter all equal the official tiktoken's count.
func TestReference(t *testing.T) {
	ref := loadReference(t)
	for _, enc := range encNames {
		c := newCounter(t, enc)
		for i, r := range append(ref.Strings, ref.Bodies...) {
			want, ok := r.Counts[enc]
			if !ok {
				t.Fatalf("no %s count for input %d", enc, i)
			}
			if got := direct(t, enc, r.Text); got != want {
				t.Errorf("%s input %d %.60q: direct %d, official %d", enc, i, r.Text, got, want)
			}
			if got, _ := composed(t, enc, []byte(r.Text), 1, 0); got != want {
				t.Errorf("%s input %d %.60q: composed %d, official %d", enc, i, r.Text, got, want)
			}
			if got := c.Count(context.Background(), "", []byte(r.Text)); got.N != want {
				t.Errorf("%s input %d %.60q: counter %+v, official %d", enc, i, r.Text, got, want)
			}
		}
	}
}

// TestReferenceCorpus compares the Counter with the official counts of the
// corpus bodies (recorded by name and sha256; the bodies are not committed).
func TestReferenceCorpus(t *testing.T) {
	ref := loadReference(t)
	if _, err := os.Stat(corpusDir); err != nil || len(ref.Corpus) == 0 {
		t.Skip("corpus absent:", corpusDir)
	}
	if raceEnabled {
		t.Skip("slow under the race detector; TestCorpusComposedEqualsDirect covers part")
	}
	for _, enc := range encNames {
		c := newCounter(t, enc)
		for _, r := range ref.Corpus {
			b, err := os.ReadFile(filepath.Join(corpusDir, r.File))
			if err != nil {
				t.Errorf("%s: %v", r.File, err)
				continue
			}
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != r.SHA256 {
				t.Errorf("%s: changed since the reference was made", r.File)
				continue
			}
			if got := c.Count(context.Background(), "", b); got.N != r.Counts[enc] {
				t.Errorf("%s %s: %+v, official %d", enc, r.File, got, r.Counts[enc])
			}
		}
	}
}
