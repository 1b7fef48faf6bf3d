package compiler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// countStore is a minimal Store (compilertest would be an import cycle).
type countStore struct {
	mu        sync.Mutex
	persisted int
}

func (*countStore) Ancestor(context.Context, artifact.Scope, []artifact.Digest) (artifact.Lineage, error) {
	return artifact.Lineage{}, nil
}
func (s *countStore) Persist(_ context.Context, _ artifact.Scope, a []artifact.Artifact) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.persisted += len(a)
	return nil
}
func (*countStore) Record(context.Context, artifact.Scope, artifact.Record) error { return nil }
func (*countStore) Missing(_ context.Context, _ artifact.Scope, d []artifact.Digest) ([]artifact.Digest, error) {
	return d, nil
}

// brokenFormat is chat whose provider check always fails, standing in for
// any rewrite the checker refuses.
type brokenFormat struct{ chatFormat }

func (brokenFormat) check(*doc, *doc) error { return errors.New("refused") }

// A rewrite that fails the validity check goes out as the original, is
// reported as invalid_output, and is counted (safely under concurrency).
func TestInvalidOutputCounted(t *testing.T) {
	saved := formats
	formats = append(append(formats[:0:0], formats...), struct {
		suffix string
		f      format
	}{"/broken", brokenFormat{}})
	t.Cleanup(func() { formats = saved })

	out := strings.Repeat("line of tool output\n", 500)
	enc, _ := json.Marshal(out)
	body := []byte(`{"messages":[{"role":"tool","tool_call_id":"a","content":` + string(enc) + `},{"role":"tool","tool_call_id":"b","content":` + string(enc) + `}]}`)
	store := &countStore{}
	c, err := New(Options{}, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := c.Compile(context.Background(), Request{Path: "/v1/broken", Body: body, Mode: ModeEnforce})
			if res.Decision != Passthrough || res.Reason != ReasonInvalidOutput || !bytes.Equal(res.Body, body) {
				t.Errorf("got %s/%s", res.Decision, res.Reason)
			}
		}()
	}
	wg.Wait()
	if n := c.InvalidOutputs(); n != 8 {
		t.Fatalf("InvalidOutputs() = %d, want 8", n)
	}
	if store.persisted != 0 {
		t.Fatalf("a refused rewrite persisted %d artifacts", store.persisted)
	}
	// The same body as real chat is accepted and not counted.
	if res := c.Compile(context.Background(), Request{Path: "/v1/chat/completions", Body: body, Mode: ModeEnforce}); res.Decision != Accepted {
		t.Fatalf("chat: %s/%s", res.Decision, res.Reason)
	}
	if n := c.InvalidOutputs(); n != 8 {
		t.Fatalf("InvalidOutputs() = %d after a valid rewrite", n)
	}
}
