package vault

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// benchArts returns 50 distinct artifacts of about 20 KB of text each.
func benchArts(round int) []compiler.Artifact { return benchArtsOf(fmt.Sprint("r", round)) }

func benchArtsOf(tag string) []compiler.Artifact {
	arts := make([]compiler.Artifact, 50)
	for i := range arts {
		arts[i] = mkArt(text(fmt.Sprint(tag, "a", i), 20_000))
	}
	return arts
}

// BenchmarkPersistCold writes 50 new 20 KB artifacts per op: one batch, one
// sync, one read-back. syncs/op counts db.Sync calls (two fsyncs each).
func BenchmarkPersistCold(b *testing.B) {
	s := openTest(b, Config{MaxBytes: 1 << 40})
	ctx := context.Background()
	sc := compiler.Scope{Tenant: "bench"}
	syncs := s.Stats().Syncs
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		arts := benchArts(i)
		b.StartTimer()
		if err := s.Persist(ctx, sc, arts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(s.Stats().Syncs-syncs)/float64(b.N), "syncs/op")
}

// BenchmarkPersistColdConcurrent: 16 tenants each persist 50 new 20 KB
// artifacts at once per op, as 16 concurrent cold requests do. Reported:
// p50-ms per Persist and syncs/persist, the db.Sync calls per Persist
// (group commit shares one among the Persists that wait together).
func BenchmarkPersistColdConcurrent(b *testing.B) {
	const clients = 16
	s := openTest(b, Config{MaxBytes: 1 << 40})
	ctx := context.Background()
	syncs := s.Stats().Syncs
	durs := make([]time.Duration, 0, clients*b.N)
	var mu sync.Mutex
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		arts := make([][]compiler.Artifact, clients)
		for c := range arts {
			arts[c] = benchArtsOf(fmt.Sprint("r", i, "c", c))
		}
		b.StartTimer()
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				if err := s.Persist(ctx, compiler.Scope{Tenant: fmt.Sprint("bench", c)}, arts[c]); err != nil {
					b.Error(err)
				}
				mu.Lock()
				durs = append(durs, time.Since(t0))
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(s.Stats().Syncs-syncs)/float64(len(durs)), "syncs/persist")
}

// BenchmarkPersistWarm verifies the same 50 artifacts, already stored.
func BenchmarkPersistWarm(b *testing.B) {
	s := openTest(b, Config{})
	ctx := context.Background()
	sc := compiler.Scope{Tenant: "bench"}
	arts := benchArts(0)
	if err := s.Persist(ctx, sc, arts); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Persist(ctx, sc, arts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAncestor looks up a 200-message chain whose longest recorded
// prefix is at len-3 (two misses, one hit), among 200 recorded conversations.
func BenchmarkAncestor(b *testing.B) {
	s := openTest(b, Config{})
	ctx := context.Background()
	sc := compiler.Scope{Tenant: "bench"}
	chain := make([]compiler.Digest, 200)
	for i := range chain {
		chain[i] = dg(fmt.Sprint("m", i))
	}
	exp := map[compiler.Digest]int{}
	for i := range 20 {
		exp[dg(fmt.Sprint("art", i))] = 1
	}
	for i := range 198 {
		if err := s.Record(ctx, sc, compiler.Record{ChainEnd: chain[i], Length: i + 1, Exposures: exp}); err != nil {
			b.Fatal(err)
		}
	}
	for c := range 200 { // other conversations, so lookups are not all in one memtable corner
		if err := s.Record(ctx, sc, compiler.Record{ChainEnd: dg(fmt.Sprint("other", c)), Length: 1}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		lin, err := s.Ancestor(ctx, sc, chain)
		if err != nil || !lin.Found || lin.Length != 198 {
			b.Fatal(lin, err)
		}
	}
}

// BenchmarkAncestorMiss walks a 500-message chain with nothing recorded.
func BenchmarkAncestorMiss(b *testing.B) {
	s := openTest(b, Config{})
	ctx := context.Background()
	chain := make([]compiler.Digest, 500)
	for i := range chain {
		chain[i] = dg(fmt.Sprint("m", i))
	}
	if err := s.Record(ctx, compiler.Scope{Tenant: "x"}, compiler.Record{ChainEnd: dg("x"), Length: 1}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if lin, err := s.Ancestor(ctx, compiler.Scope{Tenant: "bench"}, chain); err != nil || lin.Found {
			b.Fatal(lin, err)
		}
	}
}

// BenchmarkEncodeToolResults: the CPU a cold gateway request's write costs
// before its transaction, for 50 tool results of 20 KB as a Go client
// spells them (a tab, two quotes and a newline escaped per line): encode
// (what the write waits for: the digest check, the v3 check, s2 and the
// CRC, on every core) and unquote (the v3 decoder alone).
//
//	go test ./vault -run xxx -bench EncodeToolResults -benchmem
func BenchmarkEncodeToolResults(b *testing.B) {
	arts := make([]*compiler.Artifact, 50)
	var size int64
	for i := range arts {
		text := fixtures.ToolOutput(1000+i, 20_000)
		raw, _ := json.Marshal(text)
		arts[i] = &compiler.Artifact{Digest: compiler.ArtifactDigest(text, raw), Text: text, Raw: raw, Tool: "bash", Args: `{"command":"cat x"}`}
		size += int64(len(raw))
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeAll(nil, arts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unquote", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			for _, a := range arts {
				var ok bool
				if buf, ok = unquoteJSON(buf, a.Raw); !ok {
					b.Fatal("refused")
				}
			}
		}
	})
}
