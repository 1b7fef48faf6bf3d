// Package badgervault is Token Terminator's embedded artifact store: a Badger v4
// database holding tool results removed from requests, keyed by tenant and
// content digest, plus the conversation lineage records that drive leases.
//
// Layout of the keys (all under one Badger directory, mode 0700):
//
//	s/hmac                          32-byte random HMAC key for Tenant
//	a/<tenant>/<hex sha256(Text)>   artifact content: Text, Raw, Tool, Args
//	m/<tenant>/<hex sha256(Text)>   artifact metadata: sizes, created, last seen
//	l/<scope key>/<hex chain end>   lineage node (expires after Retention)
//
// Metadata lives apart from content so that eviction and the start-up size
// scan touch only small values that stay in the LSM tree, while content above
// 1 KiB goes to the value log. The scope key is the first 16 bytes of
// sha256(tenant + "\x00" + session), hex, so lineage is per tenant and session.
// A lineage node stores only the exposures that differ from an ancestor's
// (lineage.go), so a conversation's lineage grows as n log n.
//
// Durability and failure (each has a test that reproduces it):
//
//   - A receipt names only content that was written, synced (durable.go:
//     Badger's Sync plus memtable logs it skips) and read back,
//     or, for content already stored, read and checked (CRC and digest) at
//     least once by this process (integrity.go); a background scrub re-reads
//     everything at a bounded rate. An unreadable record is dropped, so the
//     next request carrying it stores it again.
//   - A full disk is ErrFull, never a crash: Badger writes through memory
//     maps of sparse files, where no space means SIGBUS, so writes (and
//     Open) are refused unless the disk keeps a reserve for what Badger
//     writes on its own (space.go).
//   - A damaged database is ErrDamaged at Open, its files untouched, or
//     with Config.MoveAsideDamaged moved aside for a fresh one (open.go).
//   - Capacity counts artifacts and lineage; one tenant holds at most
//     Config.TenantMaxBytes of it (tenants.go).
//
// Tool and Args are private provenance. Nothing in this package logs them, or
// Text, Raw or credentials; logs carry only counts, sizes and digest prefixes.
package badgervault
