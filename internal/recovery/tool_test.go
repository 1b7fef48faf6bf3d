package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

var allFormats = []provider.Format{provider.Chat, provider.Responses, provider.Anthropic}

func TestDefinition(t *testing.T) {
	for _, f := range allFormats {
		def := Definition(f)
		var v map[string]any
		if err := json.Unmarshal(def, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var name, schemaKey string
		switch f {
		case provider.Chat:
			fn, _ := v["function"].(map[string]any)
			name, _ = fn["name"].(string)
			schemaKey = "parameters"
			if v["type"] != "function" || fn["parameters"] == nil || fn["description"] == "" {
				t.Fatalf("chat definition %s", def)
			}
		case provider.Responses:
			name, _ = v["name"].(string)
			schemaKey = "parameters"
			if v["type"] != "function" || v[schemaKey] == nil {
				t.Fatalf("responses definition %s", def)
			}
		case provider.Anthropic:
			name, _ = v["name"].(string)
			schemaKey = "input_schema"
			if v[schemaKey] == nil {
				t.Fatalf("anthropic definition %s", def)
			}
		}
		if name != ToolName || !bytes.Equal(def, Definition(f)) {
			t.Fatalf("%s: name %q", f, name)
		}
	}
	if Definition("cohere_chat") != nil {
		t.Fatal("no definition for an unknown format")
	}
}

func TestAppendTool(t *testing.T) {
	chat, resp, anth := Definition(provider.Chat), Definition(provider.Responses), Definition(provider.Anthropic)
	cases := []struct {
		name   string
		format provider.Format
		in     string
		want   string // "" with err
		err    error
	}{
		{"chat appended after client tools", provider.Chat,
			`{"model":"gpt-4o", "tools": [ {"type":"function","function":{"name":"bash"}} ] ,"messages":[]}`,
			`{"model":"gpt-4o", "tools": [ {"type":"function","function":{"name":"bash"}},` + string(chat) + ` ] ,"messages":[]}`, nil},
		{"chat without tools", provider.Chat, `{"model":"gpt-4o","messages":[]}`,
			`{"model":"gpt-4o","messages":[],"tools":[` + string(chat) + `]}`, nil},
		{"empty tools array", provider.Responses, `{"input":"hi","tools":[ ]}`,
			`{"input":"hi","tools":[` + string(resp) + ` ]}`, nil},
		{"anthropic with cache_control on the last client tool", provider.Anthropic,
			`{"tools":[{"name":"Read","input_schema":{},"cache_control":{"type":"ephemeral"}}],"messages":[]}`,
			`{"tools":[{"name":"Read","input_schema":{},"cache_control":{"type":"ephemeral"}},` + string(anth) + `],"messages":[]}`, nil},
		{"empty object", provider.Anthropic, `{}`, `{"tools":[` + string(anth) + `]}`, nil},
		{"name taken (chat)", provider.Chat, `{"tools":[{"type":"function","function":{"name":"token_terminator"}}]}`, "", ErrToolPresent},
		{"name taken (anthropic)", provider.Anthropic, `{"tools":[{"name":"token_terminator","input_schema":{}}]}`, "", ErrToolPresent},
		{"name taken, escaped spelling", provider.Responses, `{"tools":[{"type":"function","name":"token\u005fterminator"}]}`, "", ErrToolPresent},
		{"tools not an array", provider.Chat, `{"tools":null}`, "", ErrShape},
		{"not an object", provider.Chat, `[1]`, "", ErrShape},
		{"not JSON", provider.Chat, `{"tools":[}`, "", ErrShape},
		{"unknown format", "cohere_chat", `{}`, "", ErrShape},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := AppendTool(c.format, []byte(c.in))
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if c.err != nil {
				if string(got) != c.in {
					t.Fatalf("on error the body must come back unchanged: %s", got)
				}
				return
			}
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			// Appending twice finds the tool present: callers can append to
			// a body that already went through once.
			if _, err := AppendTool(c.format, got); !errors.Is(err, ErrToolPresent) {
				t.Fatalf("second append: %v", err)
			}
		})
	}
}

func TestExecute(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := artifact.ID(f.uni.Digest)
	k1 := "tenant:Bearer k1"
	api := func(target string) string {
		_, body := f.get(t, "GET", target, "Bearer k1")
		return string(body)
	}
	cases := []struct {
		name, args, want string
	}{
		{"get matches the API", `{"action":"artifact_get","artifact_id":"` + id + `","offset":2,"limit":9}`,
			api("/token-terminator/artifacts/" + id + "?offset=2&limit=9")},
		{"get with defaults", `{"action":"artifact_get","artifact_id":"` + id + `"}`,
			api("/token-terminator/artifacts/" + id)},
		{"search matches the API", `{"action":"artifact_search","query":"needle","limit":10}`,
			api("/token-terminator/artifacts?q=needle&limit=10")},
		{"unknown id", `{"action":"artifact_get","artifact_id":"a_0123"}`, api("/token-terminator/artifacts/a_0123")},
		{"another tenant's id", `{"action":"artifact_get","artifact_id":"` + artifact.ID(f.other.Digest) + `"}`,
			api("/token-terminator/artifacts/a_0123")},
	}
	for _, c := range cases {
		if got := string(Execute(ctx, f.mem, k1, []byte(c.args))); got != c.want {
			t.Fatalf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	for _, bad := range []string{
		`not json`, `[]`, `{"action":"rm -rf"}`, `{"action":"artifact_get","artifact_id":"` + id + `","offset":1.5}`,
		`{"action":"artifact_get","artifact_id":"` + id + `","offset":-1}`, `{"action":"artifact_get","artifact_id":"` + id + `","limit":"ten"}`,
	} {
		var e struct{ Error *Error }
		out := Execute(ctx, f.mem, k1, []byte(bad))
		if err := json.Unmarshal(out, &e); err != nil || e.Error == nil || e.Error.Type != "invalid_request" {
			t.Fatalf("%s: %s", bad, out)
		}
	}
	// Execute honours the configured caps.
	out := ExecuteWith(ctx, Config{MaxPageChars: 3}, f.mem, k1, []byte(`{"action":"artifact_get","artifact_id":"`+id+`","limit":100}`))
	var p Page
	if json.Unmarshal(out, &p); p.Content != "hél" {
		t.Fatalf("cap: %s", out)
	}
	if strings.Contains(string(Definition(provider.Chat)), "\n") {
		t.Fatal("definitions are one line")
	}
}
