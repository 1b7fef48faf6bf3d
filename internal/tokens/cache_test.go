package tokens

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

func TestCacheBound(t *testing.T) {
	c := newCache(100 * entryBytes * shards) // 100 entries per shard
	for i := range 10_000 {
		c.put(keyOf(0, fmt.Appendf(nil, "piece %d", i)), i)
	}
	if n := c.len(); n != 100*shards {
		t.Fatalf("%d entries, want %d", n, 100*shards)
	}
	// Recent entries survive, and a hit gives an entry a second chance.
	hot := keyOf(0, []byte("piece 9999"))
	if n, ok := c.get(hot); !ok || n != 9999 {
		t.Fatalf("newest entry: %d %v", n, ok)
	}
	for i := range 10_000 {
		c.put(keyOf(1, fmt.Appendf(nil, "piece %d", i)), i) // other encoding: other keys
		if i%50 == 0 {
			c.get(hot)
		}
	}
	if _, ok := c.get(hot); !ok {
		t.Error("entry hit all along was evicted")
	}
	if _, ok := c.get(keyOf(0, []byte("piece 9990"))); ok {
		t.Error("cold entry survived")
	}
	if n := c.len(); n != 100*shards {
		t.Fatalf("%d entries after churn", n)
	}
}

// TestCacheMemoryBound checks entryBytes against the heap a full cache
// really holds, so CacheBytes bounds memory (about 64 MiB by default).
func TestCacheMemoryBound(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocates a 64 MiB cache")
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	c := newCache(DefaultCacheBytes)
	max := c.shard[0].max * shards
	for i := range 2 * max { // full, then churned
		c.put(key{a: uint64(i) * 0x9e3779b97f4a7c15, b: uint64(i)}, i)
	}
	used := heap() - before
	runtime.KeepAlive(c)
	t.Logf("%d entries use %d bytes (%.0f per entry, %d accounted)", max, used, float64(used)/float64(max), entryBytes)
	if used > DefaultCacheBytes {
		t.Fatalf("cache holds %d bytes, bound %d", used, DefaultCacheBytes)
	}
}

// TestMemoMemoryBound checks memoEntryBytes the same way, with parts of
// typical length (tool output words are 2 to 20 bytes).
func TestMemoMemoryBound(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocates an 8 MiB memo")
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const bound = 8 << 20
	before := heap()
	m := new(memoGens) // one shard
	m.init(bound)
	for i := 0; m.old == nil || m.size < m.max-100; i++ { // fill both generations
		m.add(fmt.Sprintf(" word%0*d", i%16, i), int32(i))
	}
	used := heap() - before
	runtime.KeepAlive(m)
	t.Logf("%d entries use %d bytes", len(m.cur)+len(m.old), used)
	if used > bound {
		t.Fatalf("memo holds %d bytes, bound %d", used, bound)
	}
}

func TestCacheConcurrent(t *testing.T) {
	c := newCache(50 * entryBytes * shards)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				k := keyOf(0, fmt.Appendf(nil, "%d", (g*1000+i)%3000))
				if n, ok := c.get(k); ok && n != (g*1000+i)%3000 {
					t.Errorf("wrong count %d", n)
					return
				}
				c.put(k, (g*1000+i)%3000)
			}
		})
	}
	wg.Wait()
}
