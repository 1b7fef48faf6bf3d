package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"
)

// The badger block's values are checked, named in the error; the tenant
// quota and the damage option are part of the vault's one configuration,
// so a second handler that disagrees on them is refused.
func TestBadgerVaultOptions(t *testing.T) {
	tests := []struct {
		name string
		b    BadgerVault
		err  string
	}{
		{"defaults", BadgerVault{}, ""},
		{"quota within capacity", BadgerVault{MaxBytes: int64p(100), TenantMaxBytes: int64p(100)}, ""},
		{"quota above capacity", BadgerVault{MaxBytes: int64p(100), TenantMaxBytes: int64p(101)}, "tenant_max_bytes (101) must not exceed max_bytes (100)"},
		{"zero quota", BadgerVault{TenantMaxBytes: int64p(0)}, "tenant_max_bytes must be positive, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.b.Validate()
			if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.err)
			}
		})
	}

	app, ctx := newApp(t)
	dir := t.TempDir()
	raw := func(v string) json.RawMessage {
		return json.RawMessage(`{"backend":"badger","dir":"` + dir + `",` + v + `}`)
	}
	a := &Handler{VaultRaw: raw(`"max_bytes":1048576,"tenant_max_bytes":1048576`)}
	if err := provisionHandler(t, app, ctx, a); err != nil {
		t.Fatal(err)
	}
	b := &Handler{VaultRaw: raw(`"max_bytes":1048576`)}
	err := provisionHandler(t, app, ctx, b)
	if err == nil || !strings.Contains(err.Error(), "tenant_max_bytes=1048576") || !strings.Contains(err.Error(), "tenant_max_bytes=262144") {
		t.Fatalf("quota conflict: %v", err)
	}
}
