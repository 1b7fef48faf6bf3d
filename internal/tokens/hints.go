package tokens

// Hints: the compiler knows where every message of a body starts (it parsed
// the body to find them), and an agent resends its history byte for byte.
// Cutting the body at message starts makes every resent message a segment
// whose count is one keyed-hash lookup, instead of a gear-hash pass over
// its bytes and a lookup per piece: only segments never seen before are
// split into pieces and counted (and then remembered whole).
//
// A hint is only a place to look: the cut is made at the first position at
// or after it where cutOK holds (within maxHintReach bytes), so the count is
// exact whatever the hints are (split.go: any choice of such positions
// composes exactly). Wrong or stale hints only cost lookups that miss.

// maxHintReach bounds the search for a cut after a hint. A message starts
// with `{"role` or `{"type`, so a cut is a few bytes away.
const maxHintReach = 64

// minSegment keeps tiny messages out of the cache on their own: a cut is
// made at a hint only once the segment is at least this long, so short
// messages ride with their neighbours. The choice depends only on the
// bytes and hints before it, so a resent prefix yields the same segments.
const minSegment = 256

// segments calls emit with consecutive segments of b, cut at positions
// derived from hints (ascending offsets into b; others are ignored).
func segments(b []byte, hints []int, emit func(seg []byte)) {
	start := 0
	for _, h := range hints {
		if h < start+minSegment || h <= 0 || h >= len(b) {
			continue
		}
		p := h
		for end := min(len(b), h+maxHintReach); p < end && !cutOK(b, p); p++ {
		}
		if p >= len(b) || !cutOK(b, p) {
			continue
		}
		emit(b[start:p])
		start = p
	}
	if start < len(b) {
		emit(b[start:])
	}
}
