package compilertest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CorpusRequest is one request of the shared corpus: the URL path it is
// sent to and its exact body bytes.
type CorpusRequest struct {
	Path string
	Body []byte
}

// CorpusFile is one file of the corpus: a last-step request, or every step
// of a session in order.
type CorpusFile struct {
	Name     string // path relative to the corpus directory
	Format   string // compiler format name (openai_chat, openai_responses, anthropic_messages) or "mixed"
	Steps    bool
	Requests []CorpusRequest
}

// CorpusDir returns the shared corpus directory, ../shared/corpus next to
// the repository root (found by walking up to go.mod from the working
// directory), and false when it does not exist.
func CorpusDir() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
	c := filepath.Join(dir, "..", "shared", "corpus")
	if st, err := os.Stat(filepath.Join(c, "index.json")); err != nil || st.IsDir() {
		return "", false
	}
	return c, true
}

// Corpus loads the shared corpus for a test, or skips the test when the
// corpus is absent (as in a user's clone) or in -short mode.
func Corpus(t testing.TB) []CorpusFile {
	t.Helper()
	if testing.Short() {
		t.Skip("corpus skipped in -short mode")
	}
	dir, ok := CorpusDir()
	if !ok {
		t.Skip("shared corpus not found (../shared/corpus)")
	}
	files, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// corpusFormats maps the index's format names to compiler formats and paths.
var corpusFormats = []struct{ prefix, name, path string }{
	{"openai-chat", "openai_chat", "/v1/chat/completions"},
	{"openai-responses", "openai_responses", "/v1/responses"},
	{"anthropic-messages", "anthropic_messages", "/v1/messages"},
}

// LoadCorpus reads every data file listed in dir/index.json, in index
// order: *.last.json files as one request, steps/*.steps.jsonl files as one
// request per line in order, and the SDK capture with each line's own path.
func LoadCorpus(dir string) ([]CorpusFile, error) {
	idx, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, err
	}
	var entries []struct {
		File   string `json:"file"`
		Format string `json:"format"`
	}
	if err := json.Unmarshal(idx, &entries); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	var out []CorpusFile
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(e.File)))
		if err != nil {
			return nil, err
		}
		f := CorpusFile{Name: e.File, Steps: strings.HasSuffix(e.File, ".jsonl")}
		if strings.HasPrefix(e.File, "sdk-capture/") {
			f.Format = "mixed"
			err = eachLine(data, func(line []byte) error {
				var r struct {
					Path string          `json:"path"`
					Body json.RawMessage `json:"body"`
				}
				if err := json.Unmarshal(line, &r); err != nil {
					return err
				}
				f.Requests = append(f.Requests, CorpusRequest{Path: r.Path, Body: []byte(r.Body)})
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.File, err)
			}
			out = append(out, f)
			continue
		}
		path := ""
		for _, cf := range corpusFormats {
			if strings.HasPrefix(e.Format, cf.prefix) {
				f.Format, path = cf.name, cf.path
			}
		}
		if path == "" {
			return nil, fmt.Errorf("%s: unknown format %q", e.File, e.Format)
		}
		if !f.Steps {
			f.Requests = []CorpusRequest{{Path: path, Body: data}}
		} else if err := eachLine(data, func(line []byte) error {
			f.Requests = append(f.Requests, CorpusRequest{Path: path, Body: line})
			return nil
		}); err != nil {
			return nil, fmt.Errorf("%s: %w", e.File, err)
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, errors.New("corpus index lists no files")
	}
	return out, nil
}

func eachLine(data []byte, fn func([]byte) error) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimRight(sc.Bytes(), "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := fn(bytes.Clone(line)); err != nil {
			return err
		}
	}
	return sc.Err()
}
