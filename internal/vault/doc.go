// Package vault is the contract every artifact store of Token Terminator
// implements (Backend, and the optional Ledger), and what the backends
// share so that each stores and answers exactly as the others: the record
// codec (artifact content as one s2 block with a CRC-32C, lineage nodes in
// a versioned varint layout), the digest checks (NamesNew, NamesStored),
// the rules of Resolve and Search, the errors and the defaults.
//
// The backends are peer packages: vault/badgervault (embedded, one
// directory) and vault/redisvault (a fleet's shared Redis); vault/storetest
// is the conformance suite both pass. This package imports neither, so a
// gateway links only the backend it uses.
package vault
