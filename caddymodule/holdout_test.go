package caddymodule

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/holdout"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

const labelA = "0123456789abcdef0123456789abcdef"

func TestHoldoutCaddyfile(t *testing.T) {
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`token_terminator {
		holdout 5%
		exclude_tools memory
		tenant_label ` + labelA + ` team-a
		tenant_settings team-a {
			min_artifact_chars 2000
			holdout 50%
			mode shadow
		}
		exclude_tools recall memory
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if h.Holdout != "5%" || !reflect.DeepEqual(h.ExcludeTools, []string{"memory", "recall"}) {
		t.Fatalf("holdout %q exclude_tools %v", h.Holdout, h.ExcludeTools)
	}
	s := h.LabelSettings["team-a"]
	if s.MinArtifactChars == nil || *s.MinArtifactChars != 2000 || s.Holdout != "50%" || s.Mode != "shadow" {
		t.Fatalf("tenant_settings %+v", s)
	}
	h.applyDefaults()
	if opts := h.compilerOptions(); !reflect.DeepEqual(opts.ExcludeTools, []string{"memory", "recall"}) {
		t.Fatalf("exclude_tools does not reach the compiler: %v", opts.ExcludeTools)
	}
	rt := h.holdoutRuntime()
	if m, min, share := rt.Modes["team-a"], rt.Mins["team-a"], rt.Shares["team-a"]; m != compiler.ModeShadow || min != 2000 || share != 5000 {
		t.Fatalf("team-a: mode %s, min_artifact_chars %d, holdout %d", m, min, share)
	}
	if len(rt.Modes) != 1 || len(rt.Mins) != 1 || len(rt.Shares) != 1 || rt.Share != 500 {
		t.Fatalf("the gateway's holdout %+v", rt)
	}
}

// Bad values are refused, naming them.
func TestHoldoutCaddyfileRefuses(t *testing.T) {
	for _, tt := range []struct{ input, want string }{
		{"holdout 101%", `"101%"`},
		{"holdout abc", `"abc"`},
		{"holdout 0.001%", `"0.001%"`},
		{"exclude_tools", "at least one tool name"},
		{"tenant_settings team-b {\nmode shadow\n}", `"team-b"`},
		{"tenant_label " + labelA + " team-a\ntenant_settings team-a {\nmode fast\n}", "'fast'"},
		{"tenant_label " + labelA + " team-a\ntenant_settings team-a {\nholdout 200\n}", `"200"`},
		{"tenant_label " + labelA + " team-a\ntenant_settings team-a {\nbogus 1\n}", "'bogus'"},
		{"tenant_label " + labelA + " team-a\ntenant_settings team-a {\nmin_artifact_chars 0\n}", "0"},
		{"mode off\ntenant_label " + labelA + " team-a\ntenant_settings team-a {\nmode enforce\n}", "mode off opens no vault"},
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("token_terminator {\n" + tt.input + "\n}"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one naming %s", tt.input, err, tt.want)
		}
	}
}

// TestSummarizeHoldout: records aggregate per conversation into the
// estimator's input; fewer than 30 conversations per arm give no number.
func TestSummarizeHoldout(t *testing.T) {
	var recs []vault.LedgerRecord
	add := func(conv, arm string, n int, cost float64, status int, retry bool) {
		for i := 0; i < n; i++ {
			recs = append(recs, vault.LedgerRecord{Time: int64(1000 + len(recs)), Tenant: "t1", Conversation: conv, Model: "gpt-4o", Arm: arm,
				Status: status, Retry: retry && i == n-1, RawBytes: 1000, Reason: map[string]string{"control": "holdout"}[arm],
				Usage: &vault.LedgerUsage{Cost: cost, Output: 10}})
		}
	}
	add("c_a", "control", 3, 100, 200, true)
	add("c_b", "treatment", 2, 60, 500, false)
	recs = append(recs, vault.LedgerRecord{Time: 1, Conversation: "c_x"}) // in no arm
	convs := holdoutConversations(recs)
	want := []holdout.Conversation{
		{Arm: holdout.Control, Tenant: "t1", Model: "gpt-4o", RawPrompt: 3000, Billed: 300, Requests: 3, OutputTokens: 30, Retries: 1},
		{Arm: holdout.Treatment, Tenant: "t1", Model: "gpt-4o", RawPrompt: 2000, Billed: 120, Requests: 2, OutputTokens: 20, Errors: 2},
	}
	if !reflect.DeepEqual(convs, want) {
		t.Fatalf("conversations\n got %+v\nwant %+v", convs, want)
	}
	hs := summarizeHoldout(recs, "")
	if hs == nil || hs.Savings.Enough || hs.Savings.Point != nil || hs.Harm["errors"].Enough {
		t.Fatalf("two conversations gave a number: %+v", hs)
	}
	if hs.Arms[1].ShadowCompiled != 3 || hs.Arms[1].Requests != 3 || hs.Arms[0].CostPerRaw != 0.06 {
		t.Fatalf("arms %+v", hs.Arms)
	}
	// 30 conversations per arm: a number, treatment 40% cheaper.
	recs = nil
	for i := 0; i < 30; i++ {
		add(fmt.Sprintf("c_c%d", i), "control", 1+i%3, 100+float64(i), 200, false)
		add(fmt.Sprintf("c_t%d", i), "treatment", 1+i%3, 60+0.6*float64(i), 200, false)
	}
	hs = summarizeHoldout(recs, "")
	if !hs.Savings.Enough || *hs.Savings.Low > 0.4 || *hs.Savings.High < 0.4 || len(hs.Series) != 1 || hs.Bucket != "hour" {
		t.Fatalf("savings %+v series %+v", hs.Savings, hs.Series)
	}
	if summarizeHoldout([]vault.LedgerRecord{{Conversation: "c"}}, "") != nil {
		t.Fatal("records in no arm make a holdout object")
	}
}
