package cost

import (
	"bytes"
	"testing"
)

func TestGeminiModel(t *testing.T) {
	var c Config
	tests := []struct {
		model string
		read  float64
	}{
		{"gemini-2.5-pro", 0.25},
		{"gemini-2.5-flash", 0.25},
		{"gemini-3-pro-preview", 0.1},
		{"", 0.1},
	}
	for _, tt := range tests {
		m := c.Model("gemini", tt.model)
		if m.Family != Gemini || m.CacheRead != tt.read || m.CacheWrite != 1 || m.Breakpoints || m.MinPrefix != 1024 {
			t.Errorf("%s: %+v", tt.model, m)
		}
	}
	// A Gemini model name on another format's path is not priced as Gemini.
	if f := FamilyOf("openai_chat", "gemini-2.5-pro"); f != Other {
		t.Errorf("chat path family %s", f)
	}
	c.Gemini = Overrides{CacheRead: ptr(0.5)}
	if m := c.Model("gemini", "gemini-2.5-pro"); m.CacheRead != 0.5 {
		t.Errorf("override not applied: %v", m.CacheRead)
	}
	bad := Config{Gemini: Overrides{CacheRead: ptr(-1.0)}}
	if err := bad.Validate(); err == nil {
		t.Error("negative gemini cache_read accepted")
	}
}

// Gemini renders tools, then systemInstruction, then every content, the
// order the recovery tool and folds are priced in.
func TestGeminiRender(t *testing.T) {
	body := []byte(`{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]}],"systemInstruction":{"parts":[{"text":"s"}]},"tools":[{"functionDeclarations":[]}],"generationConfig":{}}`)
	r := Render("gemini", body)
	want := `[{"functionDeclarations":[]}]{"parts":[{"text":"s"}]}{"role":"user","parts":[{"text":"a"}]}{"role":"model","parts":[{"text":"b"}]}`
	if !bytes.Equal(r.Bytes, []byte(want)) || len(r.Breakpoints) != 0 {
		t.Fatalf("rendered %s", r.Bytes)
	}
}
