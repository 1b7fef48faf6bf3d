package compilertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
)

// BenchCompile1MB measures compiling a ~1 MB chat request with 50 tool
// results of ~20 KB that were all delivered before, so all 50 go out as
// receipts, and one new result that goes inline. Warm: the artifacts are
// already in the store (a retry, or the next step). Cold: each iteration
// uses a new tenant, so all 50 artifacts are written in one synced batch.
// It reports p50 and p99 in ms.
func BenchCompile1MB(b *testing.B, store artifact.Store, cold bool) {
	BenchCompile(b, store, "/v1/chat/completions", func(turns []fixtures.ChatTurn) []byte {
		return fixtures.ChatBody("gpt-4o", turns, "")
	}, cold)
}

// BenchCompile is BenchCompile1MB for any format: render turns the tool
// rounds into a request body of the format served at path.
func BenchCompile(b *testing.B, store artifact.Store, path string, render func([]fixtures.ChatTurn) []byte, cold bool) {
	benchCompile(b, store, path, render, cold, false)
}

// BenchCompileSealed1MB is BenchCompile1MB with encryption at rest, as the
// gateway runs it by default: each request derives its tenant's data keys
// (inside the timing), the compiler names artifacts by keyed ids and the
// store seals what it writes.
func BenchCompileSealed1MB(b *testing.B, store artifact.Store, cold bool) {
	benchCompile(b, store, "/v1/chat/completions", func(turns []fixtures.ChatTurn) []byte {
		return fixtures.ChatBody("gpt-4o", turns, "")
	}, cold, true)
}

func benchCompile(b *testing.B, store artifact.Store, path string, render func([]fixtures.ChatTurn) []byte, cold, sealed bool) {
	// The next step of a session: the 50 results delivered before are
	// answered (the model called another tool since), the newest is not.
	turns := fixtures.Turns(1000, 51, 20000)
	prev, body := render(turns[:50]), render(turns)
	c, err := compiler.New(compiler.Options{InlineLeases: 1}, store, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var scratch compiler.Scratch // reused as the gateway reuses a pooled body's
	req := func(tenant string, body []byte) compiler.Result {
		r := compiler.Request{Path: path, Body: body, Scope: artifact.Scope{Tenant: tenant}, Mode: compiler.ModeEnforce, Scratch: &scratch}
		ctx := ctx
		if sealed {
			k, err := seal.Derive([]byte("bench tenant key, 32 bytes......"), "sk-"+tenant)
			if err != nil {
				b.Fatal(err)
			}
			ctx = seal.NewContext(ctx, k)
			r.KeyID = func(d artifact.Digest) artifact.Digest { return k.ID(d) }
		}
		res := c.Compile(ctx, r)
		scratch.Reset(1 << 20)
		return res
	}
	req("warm", prev)
	if res := req("warm", body); res.Receipts != 50 {
		b.Fatalf("setup: %d receipts (%s), want 50", res.Receipts, res.Reason)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tenant := "warm"
		if cold {
			b.StopTimer()
			tenant = fmt.Sprintf("cold-%d", i)
			req(tenant, prev)
			b.StartTimer()
		}
		t0 := time.Now()
		res := req(tenant, body)
		durs = append(durs, time.Since(t0))
		if res.Receipts != 50 {
			b.Fatalf("%d receipts (%s)", res.Receipts, res.Reason)
		}
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds())/1000, "p99-ms")
}
