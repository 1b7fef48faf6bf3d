// Package vault is Token Terminator's embedded artifact store: a Badger v4
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
//
// Tool and Args are private provenance. Nothing in this package logs them, or
// Text, Raw or credentials; logs carry only counts and sizes.
package vault
