//go:build race

package integration

// raceEnabled: the test binary runs under the race detector, so binaries
// the tests build are built with it too, from the same compiled packages
// (a build without it would compile Caddy's whole dependency tree again).
const raceEnabled = true
