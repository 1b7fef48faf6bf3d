package badgervault

import (
	"errors"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// The guard reuses a free-space measure within its bounds (recheckAfter,
// recheckBytes, a margin of recheckBytes beyond the reserve) and measures
// again outside them; a refusal near the line is always from a new measure.
func TestDiskGuardReusesMeasure(t *testing.T) {
	const plenty = 1 << 40
	type step struct {
		advance time.Duration // clock moves before the check
		free    int64         // what statfs reports from this step on (0: as before)
		need    int64
		full    bool // want ErrFull
		statfs  bool // want a new measure
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"reused within the bounds", []step{
			{free: plenty, statfs: true},
			{advance: time.Millisecond},
			{advance: time.Millisecond, need: 1 << 20},
		}},
		{"measured again after recheckAfter", []step{
			{free: plenty, statfs: true},
			{advance: recheckAfter - time.Millisecond},
			{advance: time.Millisecond, statfs: true},
			{},
		}},
		{"measured again after recheckBytes admitted", []step{
			{free: plenty, statfs: true},
			{need: recheckBytes / 2},
			{need: recheckBytes / 2, statfs: true}, // the first half plus this one pass the bound
			{need: recheckBytes / 4},
		}},
		// The measured write counts too: recheckBytes/smallWrite small
		// writes from one measure to the next.
		{"small writes count towards recheckBytes", append(append([]step{{free: plenty, statfs: true}},
			make([]step, recheckBytes/smallWrite-2)...), step{statfs: true})},
		{"the measured write counts", []step{
			{free: plenty, need: recheckBytes / 2, statfs: true},
			{need: recheckBytes / 2, statfs: true},
		}},
		{"near the line every check measures", nil}, // steps below: they need the reserve
		{"a drop is seen within recheckAfter", []step{
			{free: plenty, statfs: true},
			{advance: time.Millisecond, free: 1}, // another process filled the disk: not seen yet
			{advance: recheckAfter, statfs: true, full: true},
			{statfs: true, full: true},
		}},
		{"a clock stepping back measures", []step{
			{free: plenty, statfs: true},
			{advance: -time.Second, statfs: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var free, now int64 = plenty, 1e18
			calls := 0
			g := newDiskGuard(t.TempDir(), diskOptions{memTableSize: 4 << 20, numMemtables: 2},
				func(string) (int64, bool, error) { calls++; return free, true, nil }, nil)
			g.clock = func() int64 { return now }
			line := g.reserve() + recheckBytes
			steps := tt.steps
			if tt.name == "near the line every check measures" {
				steps = []step{
					{free: line + smallWrite - 1, statfs: true},
					{statfs: true},
					{need: recheckBytes + smallWrite, statfs: true, full: true},
					{free: plenty, statfs: true},
				}
			}
			for i, s := range steps {
				now += int64(s.advance)
				if s.free != 0 {
					free = s.free
				}
				before := calls
				err := g.check(s.need)
				if got := calls > before; got != s.statfs {
					t.Errorf("step %d: measured %v, want %v", i, got, s.statfs)
				}
				if got := errors.Is(err, vault.ErrFull); got != s.full {
					t.Errorf("step %d: check = %v, want full %v", i, err, s.full)
				}
			}
		})
	}
}

// A failed measure is an error and is never reused; checkNow always
// measures.
func TestDiskGuardFailedMeasure(t *testing.T) {
	fail := true
	calls := 0
	g := newDiskGuard(t.TempDir(), diskOptions{memTableSize: 4 << 20, numMemtables: 2},
		func(string) (int64, bool, error) {
			calls++
			if fail {
				return 0, false, errors.New("statfs: injected")
			}
			return 1 << 40, true, nil
		}, nil)
	for range 2 {
		if err := g.check(0); err == nil {
			t.Fatal("check with a failing statfs allowed the write")
		}
	}
	fail = false
	for range 3 {
		if err := g.check(0); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.checkNow(0); err != nil {
		t.Fatal(err)
	}
	if calls != 4 { // two failures, one measure reused twice, checkNow
		t.Errorf("%d measures, want 4", calls)
	}
}
