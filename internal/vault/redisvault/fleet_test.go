//go:build unix

package redisvault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

func sha(s string) artifact.Digest { return sha256.Sum256([]byte(s)) }

// Two replicas on one Redis, a compiler on each, and one session whose
// requests alternate between them forward exactly the bytes a single store
// would (one Redis store, and the in-memory store), and share one tenant key.
func TestFleetAlternatingReplicas(t *testing.T) {
	srv := startServer(t)
	fleetAlternating(t, func(prefix string) *Store { return srv.open(t, Config{KeyPrefix: prefix, OpTimeout: suiteTimeout}) })
}

// The same on a three-master Redis Cluster with the cluster client.
func TestClusterFleetAlternatingReplicas(t *testing.T) {
	url := startCluster(t)
	fleetAlternating(t, func(prefix string) *Store {
		return openCluster(t, Config{URL: url, KeyPrefix: prefix, OpTimeout: suiteTimeout})
	})
}

func fleetAlternating(t *testing.T, open func(prefix string) *Store) {
	a, b, single := open("fleet:"), open("fleet:"), open("single:")
	ctx := context.Background()
	ka, err := a.TenantKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kb, err := b.TenantKey(ctx); err != nil || !bytes.Equal(ka, kb) {
		t.Fatalf("replicas disagree on the tenant key: %v", err)
	}

	opts := compiler.Options{InlineLeases: 1, Compaction: compiler.Compaction{
		Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 6, InlineRecentTurns: 5}}
	newCompiler := func(s artifact.Store) *compiler.Compiler {
		c, err := compiler.New(opts, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fleet := []*compiler.Compiler{newCompiler(a), newCompiler(b)}
	one := newCompiler(single)
	mem := newCompiler(compilertest.NewMemStore()) // an independent implementation of the contract

	// A session that re-reads files: tool results repeat across steps.
	turns := fixtures.Turns(7, 24, 9000)
	for i := range turns {
		if i%3 == 2 {
			turns[i].Output = turns[i-2].Output
		}
	}
	receipts := 0
	for step := 1; step <= len(turns); step++ {
		body := fixtures.ChatBody("gpt-4o", turns[:step], "")
		// The same clock for both, so cost decisions (prompt-cache TTLs) agree.
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(step) * 30 * time.Second)
		req := compiler.Request{Path: "/v1/chat/completions", Body: body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce, Time: at}
		got := fleet[step%2].Compile(ctx, req)
		for name, c := range map[string]*compiler.Compiler{"one Redis store": one, "the in-memory store": mem} {
			want := c.Compile(ctx, req)
			if !bytes.Equal(got.Body, want.Body) || got.Decision != want.Decision || got.Reason != want.Reason {
				t.Fatalf("step %d: fleet forwarded %d bytes (%s %s), %s %d (%s %s)",
					step, len(got.Body), got.Decision, got.Reason, name, len(want.Body), want.Decision, want.Reason)
			}
		}
		receipts += got.Receipts
	}
	if receipts == 0 {
		t.Fatal("the session never produced a receipt: the test proves nothing")
	}
	t.Logf("%d steps, %d receipts in total", len(turns), receipts)
}
