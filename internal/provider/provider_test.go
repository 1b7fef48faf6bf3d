package provider

import (
	"slices"
	"testing"
)

func TestParseFormat(t *testing.T) {
	for _, f := range Formats {
		if got, ok := ParseFormat(string(f)); !ok || got != f {
			t.Errorf("ParseFormat(%q) = %q, %v", f, got, ok)
		}
	}
	for _, s := range []string{"", "mixed", "OPENAI_CHAT", "openai_chat "} {
		if got, ok := ParseFormat(s); ok {
			t.Errorf("ParseFormat(%q) = %q, want none", s, got)
		}
	}
}

func TestCredentialHeaders(t *testing.T) {
	if got := Anthropic.CredentialHeaders(); !slices.Equal(got, []string{"X-Api-Key", "Authorization"}) {
		t.Errorf("anthropic: %v", got)
	}
	all := []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key"}
	for _, f := range []Format{Chat, Responses, ""} {
		if got := f.CredentialHeaders(); !slices.Equal(got, all) {
			t.Errorf("%q: %v", f, got)
		}
	}
}

// One table answers the three questions; each keeps its own reading of
// the name (the label and the tokenizer drop a "provider/" prefix and
// case, pricing reads the name as sent).
func TestModelTable(t *testing.T) {
	tests := []struct {
		model, label, encoding string
		vendor                 Vendor // of a Chat request
	}{
		{"", "unknown", "", VendorOther},
		{"gpt-4o-2024-08-06", "gpt-4o", EncodingO200k, VendorOpenAI},
		{"gpt-4.5-preview", "gpt-4", EncodingO200k, VendorOpenAI},
		{"gpt-4-turbo", "gpt-4", EncodingCL100k, VendorOpenAI},
		{"gpt-3.5-turbo", "gpt-3.5", EncodingCL100k, VendorOpenAI},
		{"gpt-oss-120b", "gpt-oss", "", VendorOpenAI},
		{"gpt-neo", "other", "", VendorOpenAI},
		{"chatgpt-4o-latest", "other", "", VendorOpenAI},
		{"o3-mini", "o3", EncodingO200k, VendorOpenAI},
		{"openai/gpt-4o", "gpt-4o", EncodingO200k, VendorOther},
		{"GPT-5", "gpt-5", EncodingO200k, VendorOther},
		{" gpt-5", "other", EncodingO200k, VendorOther},
		{"claude-3-5-sonnet-20241022", "claude-sonnet", "", VendorOther},
		{"claude-opus-4", "claude-opus", "", VendorOther},
		{"claude-2", "claude", "", VendorOther},
		{"meta-llama-3-70b", "llama", "", VendorOther},
		{"gpt-4-llama", "gpt-4", EncodingCL100k, VendorOpenAI},
		{"gemini-2.5-pro", "gemini", "", VendorOther},
		{"accounts/fireworks/models/kimi-k2", "other", "", VendorOther},
	}
	for _, tt := range tests {
		if got := ModelLabel(tt.model); got != tt.label {
			t.Errorf("ModelLabel(%q) = %q, want %q", tt.model, got, tt.label)
		}
		if got := EncodingOf(tt.model); got != tt.encoding {
			t.Errorf("EncodingOf(%q) = %q, want %q", tt.model, got, tt.encoding)
		}
		if got := VendorOf(Chat, tt.model); got != tt.vendor {
			t.Errorf("VendorOf(chat, %q) = %q, want %q", tt.model, got, tt.vendor)
		}
		if got := VendorOf(Anthropic, tt.model); got != VendorAnthropic {
			t.Errorf("VendorOf(anthropic, %q) = %q", tt.model, got)
		}
	}
}

func TestKnownTokenizer(t *testing.T) {
	for _, v := range []string{"auto", "o200k_base", "cl100k_base", "off"} {
		if !KnownTokenizer(v) {
			t.Errorf("%q refused", v)
		}
	}
	for _, v := range []string{"", "AUTO", "p50k_base", " off"} {
		if KnownTokenizer(v) {
			t.Errorf("%q accepted", v)
		}
	}
}
