//go:build race

package gateway

// raceEnabled: the race detector drops a share of what sync.Pool is given.
const raceEnabled = true
