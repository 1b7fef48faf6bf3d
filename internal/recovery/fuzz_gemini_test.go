package recovery

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// FuzzGeminiAnswers: whatever a Gemini answer holds (an object, the JSON
// array of a stream without alt=sse), the follow-up is valid JSON and
// stripping leaves no call of ours; whatever an alt=sse stream holds, the
// stitched client stream carries no call of ours and the stitcher never
// panics.
func FuzzGeminiAnswers(f *testing.F) {
	own := `{"functionCall":{"name":"token_terminator","args":{"action":"artifact_get","artifact_id":"a_1"}},"thoughtSignature":"c2ln"}`
	body := `{"candidates":[{"content":{"role":"model","parts":[{"text":"x","thought":true},` + own + `]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"cachedContentTokenCount":2,"candidatesTokenCount":1,"thoughtsTokenCount":1}}`
	f.Add(body)
	f.Add("[" + body + "," + body + "]")
	f.Add(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"read_file","args":{}}},` + own + `]}}]}`)
	f.Add("data: " + body + "\n\ndata: " + body + "\n\n")
	f.Fuzz(func(t *testing.T, answer string) {
		calls := []Call{{ID: "gemini_call_0", Result: []byte(`{"content":"x"}`)}}
		r := response.NewReader(provider.Gemini, response.Options{Keep: []string{ToolName}})
		r.Write([]byte(answer))
		for _, c := range OwnCalls(r.ToolCalls()) {
			calls = append(calls, Call{ID: c.ID, Result: []byte(`{}`)})
		}
		if out, err := FollowUp(provider.Gemini, []byte(geminiRequest), []byte(answer), calls); err == nil && !json.Valid(out) {
			t.Fatalf("follow-up is not valid JSON:\n%s", out)
		}
		if out, err := StripOwnCalls(provider.Gemini, []byte(answer), provider.Usage{Input: 9, Output: 8, CacheRead: 7, Known: true}); err == nil {
			if !json.Valid(out) {
				t.Fatalf("not valid JSON:\n%s", out)
			}
			r := response.NewReader(provider.Gemini, response.Options{Keep: []string{ToolName}})
			r.Write(out)
			if len(OwnCalls(r.ToolCalls())) != 0 {
				t.Fatalf("our call left in:\n%s", out)
			}
		}
		var client bytes.Buffer
		st, err := NewStitcher(provider.Gemini, &client, Config{})
		if err != nil {
			t.Fatal(err)
		}
		st.Write([]byte(answer))
		if rd, err := st.EndRound(); err == nil && rd.Continue {
			st.Close()
		}
		cr := response.NewReader(provider.Gemini, response.Options{Stream: true, Keep: []string{ToolName}})
		cr.Write(client.Bytes())
		if len(OwnCalls(cr.ToolCalls())) != 0 && bytes.Count([]byte(answer), []byte("data:")) > 0 {
			// A chunk the stitcher could not parse goes through as it came;
			// every chunk it parsed must be without our calls.
			for _, line := range bytes.Split(client.Bytes(), []byte("\n")) {
				if bytes.HasPrefix(line, []byte("data: ")) && json.Valid(line[6:]) && bytes.Contains(line, []byte(`"token_terminator"`)) {
					var v struct {
						Candidates []struct {
							Content struct {
								Parts []map[string]any `json:"parts"`
							} `json:"content"`
						} `json:"candidates"`
					}
					if json.Unmarshal(line[6:], &v) == nil {
						for _, c := range v.Candidates {
							for _, p := range c.Content.Parts {
								if fc, ok := p["functionCall"].(map[string]any); ok && fc["name"] == ToolName {
									t.Fatalf("our call reached the client:\n%s", client.Bytes())
								}
							}
						}
					}
				}
			}
		}
	})
}
