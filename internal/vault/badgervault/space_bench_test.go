package badgervault

import "testing"

// BenchmarkDiskCheck is the guard's cost per write transaction: mostly a
// reused measure, a statfs every recheckAfter or recheckBytes (the table
// sizes are rescanned every 10 s, not per call).
func BenchmarkDiskCheck(b *testing.B) {
	g := newDiskGuard(b.TempDir(), diskOptions{memTableSize: 8 << 20, numMemtables: 2}, nil, nil)
	g.lsm()
	for b.Loop() {
		if err := g.check(0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiskCheckNow is one measure: a statfs.
func BenchmarkDiskCheckNow(b *testing.B) {
	g := newDiskGuard(b.TempDir(), diskOptions{memTableSize: 8 << 20, numMemtables: 2}, nil, nil)
	g.lsm()
	for b.Loop() {
		if err := g.checkNow(0); err != nil {
			b.Fatal(err)
		}
	}
}
