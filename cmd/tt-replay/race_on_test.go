//go:build race

package main

// raceEnabled: the race detector slows the replay ~10x; the generated
// targets then run on the smaller sessions only.
const raceEnabled = true
