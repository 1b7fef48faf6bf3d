package caddymodule

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/tokens"
	"github.com/tokenterminator/caddy-token-terminator/vault"
)

type vaultHandle struct {
	store *vault.Store
	cfg   vault.Config
}

func (v *vaultHandle) Destruct() error { return v.store.Close() }

type counterHandle struct {
	counter *tokens.Counter
}

func (counterHandle) Destruct() error { return nil }

// Compile-time checks that the real packages satisfy the compiler's
// interfaces.
var (
	_ vaultStore            = (*vault.Store)(nil)
	_ compiler.TokenCounter = (*tokens.Counter)(nil)
)

func (h *Handler) vaultConfig(dir string) vault.Config {
	return vault.Config{
		Dir:      dir,
		MaxBytes: *h.VaultMaxBytes,
		// No single artifact can be larger than the body it came from.
		MaxArtifactBytes: *h.MaxBodySize,
		Logger:           h.logger.Named("vault"),
	}
}

func (h *Handler) acquireVault(dir string) (vaultStore, error) {
	cfg := h.vaultConfig(dir)
	val, loaded, err := vaults.LoadOrNew(dir, func() (caddy.Destructor, error) {
		st, err := vault.Open(cfg)
		if err != nil {
			return nil, err
		}
		return &vaultHandle{store: st, cfg: cfg}, nil
	})
	if err != nil {
		return nil, err
	}
	h.vaultKey = dir
	vh := val.(*vaultHandle)
	if loaded && (vh.cfg.MaxBytes != cfg.MaxBytes || vh.cfg.MaxArtifactBytes != cfg.MaxArtifactBytes) {
		h.logger.Warn("token_terminator: vault already open with other limits; they stay in effect until no loaded config uses this vault_dir",
			zap.String("vault_dir", dir),
			zap.Int64("open_vault_max_bytes", vh.cfg.MaxBytes),
			zap.Int64("configured_vault_max_bytes", cfg.MaxBytes))
	}
	return vh.store, nil
}

func (h *Handler) acquireCounter() (compiler.TokenCounter, error) {
	cfg := tokens.Config{
		Tokenizer:  h.Tokenizer,
		Budget:     time.Duration(h.TokenBudget),
		CacheBytes: *h.TokenCacheSize,
	}
	key := fmt.Sprintf("%s|%d|%d", cfg.Tokenizer, cfg.Budget, cfg.CacheBytes)
	val, _, err := counters.LoadOrNew(key, func() (caddy.Destructor, error) {
		c, err := tokens.New(cfg)
		if err != nil {
			return nil, err
		}
		return counterHandle{counter: c}, nil
	})
	if err != nil {
		return nil, err
	}
	h.counterKey = key
	return val.(counterHandle).counter, nil
}
