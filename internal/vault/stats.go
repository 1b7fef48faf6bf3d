package vault

// Stats is a snapshot of the vault's size and activity. It holds no content.
type Stats struct {
	Artifacts int64  // artifacts stored, all tenants
	Bytes     int64  // Text+Raw bytes of those artifacts, plus Lineage
	Lineage   int64  // lineage bytes (keys and values) counted in Bytes
	MaxBytes  int64  // configured cap
	Written   uint64 // artifacts written since Open
	Verified  uint64 // artifacts found already present by Persist since Open
	Evicted   uint64 // artifacts evicted since Open
	Corrupt   uint64 // unreadable artifacts found and dropped since Open
	// Syncs counts db.Sync calls made for Persist since Open (each is two
	// fsyncs: the memtable's log, then the value log). Concurrent Persists
	// share them, so it can be well below the Persists that wrote.
	Syncs     uint64
	LSMBytes  int64 // on-disk LSM size as Badger estimates it
	VlogBytes int64 // on-disk value-log size as Badger estimates it
}
