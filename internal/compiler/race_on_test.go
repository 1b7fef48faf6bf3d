//go:build race

package compiler_test

// raceEnabled: the race detector slows the corpus replays about tenfold.
const raceEnabled = true
