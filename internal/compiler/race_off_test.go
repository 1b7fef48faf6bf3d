//go:build !race

package compiler_test

const raceEnabled = false
