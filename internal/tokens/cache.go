package tokens

import (
	"hash/maphash"
	"sync"
)

// key names a piece under one encoding: two independent 64-bit hashes of its
// bytes. maphash seeds are random per process, so collisions cannot be
// crafted, and 128 bits make an accidental one negligible.
type key struct {
	a, b uint64
	enc  uint8
}

var seedA, seedB = maphash.MakeSeed(), maphash.MakeSeed()

func keyOf(enc uint8, piece []byte) key {
	return key{maphash.Bytes(seedA, piece), maphash.Bytes(seedB, piece), enc}
}

// entryBytes is the memory accounted per cached count: a 32-byte slot plus
// the map entry (24-byte key, 4-byte index) with Swiss-table overhead and
// growth slack. TestCacheMemoryBound measures it.
const entryBytes = 128

const shards = 16

// cache maps piece keys to token counts, bounded by entry count; eviction is
// CLOCK (second chance), which approximates LRU without moving entries on a
// hit. It holds no pointers, so the garbage collector never scans it.
type cache struct {
	shard [shards]shard
}

type shard struct {
	mu    sync.Mutex
	index map[key]int32
	slots []slot
	hand  int
	max   int
}

type slot struct {
	k   key
	n   int32
	ref bool
}

func newCache(bytes int64) *cache {
	per := int(bytes / entryBytes / shards)
	if per < 1 {
		per = 1
	}
	c := &cache{}
	for i := range c.shard {
		c.shard[i] = shard{index: map[key]int32{}, max: per}
	}
	return c
}

func (c *cache) get(k key) (int, bool) {
	s := &c.shard[k.a%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[k]
	if !ok {
		return 0, false
	}
	s.slots[i].ref = true
	return int(s.slots[i].n), true
}

func (c *cache) put(k key, n int) {
	s := &c.shard[k.a%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[k]; ok {
		s.slots[i].n = int32(n)
		return
	}
	if len(s.slots) < s.max {
		s.index[k] = int32(len(s.slots))
		s.slots = append(s.slots, slot{k: k, n: int32(n)})
		return
	}
	for s.slots[s.hand].ref { // give recently used entries a second chance
		s.slots[s.hand].ref = false
		s.hand = (s.hand + 1) % len(s.slots)
	}
	delete(s.index, s.slots[s.hand].k)
	s.slots[s.hand] = slot{k: k, n: int32(n)}
	s.index[k] = int32(s.hand)
	s.hand = (s.hand + 1) % len(s.slots)
}

// len returns the number of cached counts.
func (c *cache) len() int {
	n := 0
	for i := range c.shard {
		s := &c.shard[i]
		s.mu.Lock()
		n += len(s.slots)
		s.mu.Unlock()
	}
	return n
}
