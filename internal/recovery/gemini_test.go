package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

const geminiPath = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"

// geminiModel is a scripted Gemini: it refuses a request whose calls and
// responses are not paired (the API's 400s) or whose newest model step
// lost its thought signature, calls token_terminator (with a thought and
// a signature, and with ids or without) until it has read Rounds results,
// then answers with text quoting what it recovered. Usage reports an
// implicit cache read on every round.
type geminiModel struct {
	id     string
	rounds int
	noIDs  bool
	client bool // the last round also calls a client tool
}

type geminiTurn struct {
	parts []string // raw parts
	round int
}

func (m geminiModel) answer(t *testing.T, body []byte) geminiTurn {
	t.Helper()
	if err := compiler.CheckRules(geminiPath, body); err != nil {
		t.Fatalf("provider refused: %v\n%s", err, body)
	}
	var req struct {
		Contents []struct {
			Role  string           `json:"role"`
			Parts []map[string]any `json:"parts"`
		} `json:"contents"`
		Tools []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	got, results := 0, ""
	for i, c := range req.Contents {
		for k, p := range c.Parts {
			if fc, ok := p["functionCall"].(map[string]any); ok && c.Role == "model" && k == firstCall(c.Parts) && i >= len(req.Contents)-2 {
				if _, signed := p["thoughtSignature"]; !signed {
					t.Fatalf("missing thought_signature in the current step\n%s", body)
				}
				_ = fc
			}
			if fr, ok := p["functionResponse"].(map[string]any); ok && fr["name"] == ToolName {
				got++
				b, _ := json.Marshal(fr["response"])
				results = string(b)
			}
		}
	}
	if got < m.rounds {
		id := ""
		if !m.noIDs {
			id = fmt.Sprintf(`,"id":"tt-%d"`, got)
		}
		parts := []string{`{"text":"Looking it up.","thought":true}`,
			fmt.Sprintf(`{"functionCall":{"name":"token_terminator","args":{"action":"artifact_get","artifact_id":%q}%s},"thoughtSignature":"c2lnLXR0LQ%d=="}`, m.id, id, got)}
		if m.client && got == m.rounds-1 {
			parts = append(parts, `{"functionCall":{"name":"read_file","args":{"absolute_path":"/a"}}}`)
		}
		return geminiTurn{parts: parts, round: got}
	}
	ok := strings.Contains(results, "recovered text of the artifact")
	return geminiTurn{parts: []string{fmt.Sprintf(`{"text":"Done: recovered=%v."}`, ok)}, round: got}
}

func firstCall(parts []map[string]any) int {
	for k, p := range parts {
		if _, ok := p["functionCall"]; ok {
			return k
		}
	}
	return -1
}

func (tu geminiTurn) usage(out bool) string {
	return fmt.Sprintf(`{"promptTokenCount":%d,"cachedContentTokenCount":800,"candidatesTokenCount":%d,"thoughtsTokenCount":5,"totalTokenCount":%d}`,
		1000+tu.round, 10, 1000+tu.round+15)
}

func (tu geminiTurn) body() []byte {
	return []byte(`{"candidates":[{"content":{"role":"model","parts":[` + strings.Join(tu.parts, ",") + `]},"finishReason":"STOP","index":0}],"usageMetadata":` + tu.usage(true) + `,"modelVersion":"gemini-2.5-pro"}`)
}

// stream sends each part in a chunk of its own, the last with the
// finishReason, every chunk with the usage so far.
func (tu geminiTurn) stream() []byte {
	var b bytes.Buffer
	for i, p := range tu.parts {
		fin := ""
		if i == len(tu.parts)-1 {
			fin = `,"finishReason":"STOP"`
		}
		fmt.Fprintf(&b, "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[%s]}%s,\"index\":0}],\"usageMetadata\":%s,\"modelVersion\":\"gemini-2.5-pro\"}\r\n\r\n", p, fin, tu.usage(true))
	}
	return b.Bytes()
}

const geminiRequest = `{"contents":[{"role":"user","parts":[{"text":"What did the build print?"}]}],"tools":[{"functionDeclarations":[{"name":"read_file","parameters":{"type":"object"}}]}],"generationConfig":{"temperature":0}}`

func TestGeminiLoop(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		m      geminiModel
		rounds int
	}{
		{"none", geminiModel{rounds: 0}, 0},
		{"one", geminiModel{rounds: 1}, 1},
		{"two without ids", geminiModel{rounds: 2, noIDs: true}, 2},
		{"with a client call", geminiModel{rounds: 1, client: true}, 1},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", c.name, stream), func(t *testing.T) {
				mem := newMem()
				a := mem.put(t, loopTenant, "run_shell_command", "recovered text of the artifact, exactly")
				c.m.id = artifact.ID(a.Digest)
				body, err := AppendTool(provider.Gemini, []byte(geminiRequest))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasSuffix(body, []byte(`{"type":"object"}}]},`+string(Definition(provider.Gemini))+`],"generationConfig":{"temperature":0}}`)) {
					t.Fatalf("tool not appended after the client's: %s", body)
				}
				if _, err := AppendTool(provider.Gemini, body); err != ErrToolPresent {
					t.Fatalf("second append: %v", err)
				}
				sent := 0
				first := c.m.answer(t, body)
				var final []byte
				if stream {
					send := func(_ context.Context, b []byte, w io.Writer) error {
						sent++
						_, err := w.Write(c.m.answer(t, b).stream())
						return err
					}
					var out bytes.Buffer
					st, err := NewStitcher(provider.Gemini, &out, Config{})
					if err != nil {
						t.Fatal(err)
					}
					st.Write(first.stream())
					if _, err := st.Continue(ctx, mem, loopTenant, body, send); err != nil {
						t.Fatal(err)
					}
					final = out.Bytes()
				} else {
					send := func(_ context.Context, b []byte) (io.ReadCloser, error) {
						sent++
						return io.NopCloser(bytes.NewReader(c.m.answer(t, b).body())), nil
					}
					var rounds int
					final, rounds, err = LoopJSON(ctx, Config{}, mem, loopTenant, provider.Gemini, body, first.body(), 1<<20, send)
					if err != nil || rounds != sent {
						t.Fatalf("%v, %d rounds, %d sent", err, rounds, sent)
					}
				}
				if sent != c.rounds {
					t.Fatalf("%d follow-ups, want %d", sent, c.rounds)
				}
				r := response.NewReader(provider.Gemini, response.Options{Stream: stream, Keep: []string{ToolName}})
				r.Write(final)
				u := r.Usage()
				wantIn := 0
				for i := 0; i <= c.rounds; i++ {
					wantIn += 1000 + i
				}
				if !u.Known || u.Input != wantIn || u.CacheRead != 800*(c.rounds+1) || u.Output != 15*(c.rounds+1) {
					t.Fatalf("usage %+v, want input %d over %d rounds\n%s", u, wantIn, c.rounds+1, final)
				}
				if bytes.Contains(final, []byte(ToolName)) || bytes.Contains(final, []byte("c2lnLXR0")) {
					t.Fatalf("the client sees our tool:\n%s", final)
				}
				text := ""
				for _, call := range r.ToolCalls() {
					text += call.Name + ";"
				}
				switch {
				case c.m.client:
					// The model's step with a client call was asked again; the
					// client gets its final answer.
				case c.rounds > 0 && !bytes.Contains(final, []byte(`Done: recovered=true.`)):
					t.Fatalf("final answer: %s", final)
				}
				if c.rounds == 0 && !stream && !bytes.Equal(final, first.body()) {
					t.Fatal("an answer without our calls changed")
				}
			})
		}
	}
}

// A step whose signature sits on a client call the follow-up would leave
// out ends the loop: the API would refuse the step.
func TestGeminiFollowUpKeepsSignature(t *testing.T) {
	answer := []byte(`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"read_file","args":{}},"thoughtSignature":"c2ln"},{"functionCall":{"name":"token_terminator","args":{}}}]}}]}`)
	calls := []Call{{ID: "gemini_call_1", Result: []byte(`{"text":"x"}`)}}
	if _, err := FollowUp(provider.Gemini, []byte(geminiRequest), answer, calls); err == nil {
		t.Fatal("a follow-up without the step's signature")
	}
	answer = []byte(`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"token_terminator","args":{}},"thoughtSignature":"c2ln"},{"functionCall":{"name":"read_file","args":{}}}]}}]}`)
	calls = []Call{{ID: "gemini_call_0", Result: []byte(`{"text":"x"}`)}}
	next, err := FollowUp(provider.Gemini, []byte(geminiRequest), answer, calls)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role":"model","parts":[{"functionCall":{"name":"token_terminator","args":{}},"thoughtSignature":"c2ln"}]},{"role":"user","parts":[{"functionResponse":{"name":"token_terminator","response":{"text":"x"}}}]}]`
	if !bytes.Contains(next, []byte(want)) {
		t.Fatalf("follow-up %s", next)
	}
	if err := compiler.CheckRules(geminiPath, next); err != nil {
		t.Fatal(err)
	}
}
