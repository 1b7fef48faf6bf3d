//go:build ttbench

package main

import "runtime"

// A build for profiling (go build -tags ttbench ./cmd/caddy, as
// cmd/tt-bench -profile does) samples contention: the admin API's
// /debug/pprof/mutex and /debug/pprof/block are empty without these rates.
func init() {
	runtime.SetMutexProfileFraction(10)
	runtime.SetBlockProfileRate(10_000) // one event per 10 µs blocked
}
