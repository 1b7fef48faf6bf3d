package caddymodule

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/holdout"
)

// HoldoutSettings are the holdout (a share of whole conversations sent
// as the client wrote them, to measure the gateway against), the tools
// whose results are never replaced, and the settings an operator sets per
// tenant label.
type HoldoutSettings struct {
	// Share of conversations held out as the control arm, as a
	// percentage ("5%", "0.5"): their requests go out byte for byte as
	// the client sent them, while the compiler runs in shadow to learn
	// what it would have sent. The arm is a keyed hash of the tenant and
	// the conversation under a key derived from the tenant key, so every
	// gateway of a fleet and every restart agree, and no client can pick
	// its arm. Default: 0 (off).
	Holdout string `json:"holdout,omitempty"`

	// Tools whose results are never replaced by a receipt, vaulted by
	// compaction, or folded with their turn (e.g. memory tools whose
	// results the model must always see). Matched by the name of the call
	// a result answers, exactly.
	ExcludeTools []string `json:"exclude_tools,omitempty"`

	// Settings of the tenants carrying a label (tenant_label), by label:
	// min_artifact_chars, holdout and mode replace the handler's for them.
	LabelSettings map[string]LabelSettings `json:"tenant_settings,omitempty"`
}

// LabelSettings are the per-label overrides of tenant_settings; unset
// fields keep the handler's value.
type LabelSettings struct {
	MinArtifactChars *int   `json:"min_artifact_chars,omitempty"`
	Holdout          string `json:"holdout,omitempty"`
	Mode             string `json:"mode,omitempty"`
}

// checkHoldout refuses bad values, naming them.
func (h *Handler) checkHoldout() error {
	if h.Holdout != "" {
		if _, err := holdout.ParseShare(h.Holdout); err != nil {
			return err
		}
	}
	for _, name := range h.ExcludeTools {
		if name == "" || strings.ContainsFunc(name, unicode.IsSpace) {
			return fmt.Errorf("exclude_tools: tool name %q is empty or holds white space", name)
		}
	}
	labels := map[string]bool{}
	for _, l := range h.TenantLabels {
		labels[l] = true
	}
	for label, s := range h.LabelSettings {
		if !labels[label] {
			return fmt.Errorf("tenant_settings %q: no tenant_label carries this label", label)
		}
		if s.Holdout != "" {
			if _, err := holdout.ParseShare(s.Holdout); err != nil {
				return fmt.Errorf("tenant_settings %q: %v", label, err)
			}
		}
		if s.MinArtifactChars != nil && *s.MinArtifactChars < 1 {
			return fmt.Errorf("tenant_settings %q: min_artifact_chars must be at least 1, got %d", label, *s.MinArtifactChars)
		}
		if s.MinArtifactChars != nil && h.MaxArtifactChars != nil && *s.MinArtifactChars > *h.MaxArtifactChars {
			return fmt.Errorf("tenant_settings %q: min_artifact_chars (%d) must not exceed max_artifact_chars (%d)", label, *s.MinArtifactChars, *h.MaxArtifactChars)
		}
		switch compiler.Mode(s.Mode) {
		case "", compiler.ModeEnforce, compiler.ModeShadow, compiler.ModeOff:
		default:
			return fmt.Errorf("tenant_settings %q: mode must be enforce, shadow or off, got %q", label, s.Mode)
		}
		if s.Mode != "" && s.Mode != string(compiler.ModeOff) && h.Mode == string(compiler.ModeOff) {
			return fmt.Errorf("tenant_settings %q: mode %s needs the handler's mode to be enforce or shadow (mode off opens no vault)", label, s.Mode)
		}
	}
	return nil
}

// holdoutRuntime is the gateway's holdout of the checked settings.
func (h *Handler) holdoutRuntime() *gateway.Holdout {
	share, _ := holdout.ParseShare(h.Holdout)
	rt := gateway.NewHoldout(share)
	for label, s := range h.LabelSettings {
		if s.Holdout != "" {
			rt.Shares[label], _ = holdout.ParseShare(s.Holdout)
		}
		if s.Mode != "" {
			rt.Modes[label] = compiler.Mode(s.Mode)
		}
		if s.MinArtifactChars != nil {
			rt.Mins[label] = *s.MinArtifactChars
		}
	}
	return rt
}

// unmarshalExcludeTools reads `exclude_tools <name…>` (repeatable: the
// names add up).
func (t *Handler) unmarshalExcludeTools(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.Errf("exclude_tools needs at least one tool name")
	}
	for _, a := range args {
		if !slices.Contains(t.ExcludeTools, a) {
			t.ExcludeTools = append(t.ExcludeTools, a)
		}
	}
	return nil
}

// unmarshalTenantSettings reads
//
//	tenant_settings <label> {
//	    min_artifact_chars <n>
//	    holdout            <percent>
//	    mode               enforce|shadow|off
//	}
func (t *Handler) unmarshalTenantSettings(outer *caddyfile.Dispenser) error {
	d := outer.NewFromNextSegment()
	d.Next() // consume "tenant_settings"
	if !d.NextArg() {
		return d.Errf("tenant_settings needs a tenant label, e.g. 'tenant_settings team-a { holdout 5%% }'")
	}
	label := d.Val()
	if d.NextArg() {
		return d.Errf("tenant_settings takes one label, got extra '%s'", d.Val())
	}
	if _, dup := t.LabelSettings[label]; dup {
		return d.Errf("duplicate tenant_settings '%s'", label)
	}
	var s LabelSettings
	seen := map[string]bool{}
	setters := map[string]func(string) error{
		"min_artifact_chars": func(v string) error { return setInt(&s.MinArtifactChars, v, 1) },
		"holdout": func(v string) error {
			if _, err := holdout.ParseShare(v); err != nil {
				return err
			}
			s.Holdout = v
			return nil
		},
		"mode": func(v string) error {
			switch v {
			case "enforce", "shadow", "off":
				s.Mode = v
				return nil
			}
			return fmt.Errorf("want enforce, shadow or off, got '%s'", v)
		},
	}
	for d.NextBlock(0) {
		name := d.Val()
		set, ok := setters[name]
		if !ok {
			return d.Errf("unrecognized tenant_settings subdirective '%s'", name)
		}
		if err := oneArg(d, name, seen, set); err != nil {
			return err
		}
	}
	if t.LabelSettings == nil {
		t.LabelSettings = map[string]LabelSettings{}
	}
	t.LabelSettings[label] = s
	return nil
}
