// Package vault is Token Terminator's embedded artifact store: a Badger v4
// database holding tool results removed from requests, keyed by tenant and
// content digest, plus the conversation lineage records that drive leases.
package vault

import _ "github.com/dgraph-io/badger/v4"
