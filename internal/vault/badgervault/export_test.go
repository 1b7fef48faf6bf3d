package badgervault

import "time"

// SetClock makes the store opened with cfg read time from now (last-seen
// times and retention), for the conformance suite in package badgervault_test.
func SetClock(cfg *Config, now func() time.Time) { cfg.now = now }
