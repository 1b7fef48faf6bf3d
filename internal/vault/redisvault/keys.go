package redisvault

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// Key layout. Every key of one tenant carries the same hash tag, so a
// tenant's multi-key scripts stay on one slot (Redis Cluster, Valkey); the
// fleet-wide counters share the tag {global}.
//
//	<prefix>{global}:tenantkey        32-byte random tenant key (SET NX)
//	<prefix>{global}:bytes            Text+Raw bytes stored, all tenants
//	<prefix>{global}:tenants          set of tenant tags with artifacts
//	<prefix>{<tag>}:a:<hex digest>    artifact content (vault record codec: s2 + CRC-32C)
//	<prefix>{<tag>}:meta              hash: hex digest -> "<Text+Raw bytes> <chars> <created unix ms>"
//	<prefix>{<tag>}:seen              sorted set: hex digest, score = last seen (unix ms)
//	<prefix>{<tag>}:bytes             this tenant's Text+Raw bytes
//	<prefix>{<tag>}:l:<scope>:<hex>   lineage node (vault codec), PX = Retention
//	<prefix>{<tag>}:verified          the tenant is verified: unix ms of the last verification, PX = Retention
//	<prefix>{global}:newtenants:<m>   tenants verified in minute m (unix minutes), PX = 2 minutes
//
// The tag is the first 16 bytes of sha256(tenant), hex: any tenant string
// (braces included) yields a safe, fixed-length tag. The scope is the first
// 16 bytes of sha256(tenant + "\x00" + session), hex, as in Badger.
type keys struct{ prefix string }

type tenantKeys struct {
	tag, content, meta, seen, bytes, lineage, verified string
}

func (k keys) global(name string) string { return k.prefix + "{global}:" + name }

func (k keys) tenant(tenant string) tenantKeys {
	h := sha256.Sum256([]byte(tenant))
	return k.tagged(hex.EncodeToString(h[:16]))
}

func (k keys) tagged(tag string) tenantKeys {
	base := k.prefix + "{" + tag + "}:"
	return tenantKeys{tag: tag, content: base + "a:", meta: base + "meta", seen: base + "seen", bytes: base + "bytes", lineage: base + "l:", verified: base + "verified"}
}

func (t tenantKeys) artifact(hexDigest string) string { return t.content + hexDigest }

// scope returns the lineage key prefix of sc; t must be sc.Tenant's keys.
func (t tenantKeys) scope(sc artifact.Scope) string {
	h := sha256.Sum256([]byte(sc.Tenant + "\x00" + sc.Session))
	return t.lineage + hex.EncodeToString(h[:16]) + ":"
}

func hexOf(d artifact.Digest) string { return hex.EncodeToString(d[:]) }
