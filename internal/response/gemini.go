package response

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// FormatGemini is the Gemini API's generateContent and
// streamGenerateContent (Google AI and Vertex AI).
const FormatGemini = "gemini"

// Gemini: a body is one GenerateContentResponse (or, for
// streamGenerateContent without alt=sse, a JSON array of them); a stream
// (alt=sse) sends one whole GenerateContentResponse per data line. Tool
// calls are candidates[].content.parts[].functionCall, each whole in one
// part. usageMetadata is cumulative: every chunk of a stream may carry it,
// the last one holds the totals. promptTokenCount includes the cached
// tokens (cachedContentTokenCount, implicit or explicit cache); thoughts
// are billed as output. A stream is complete when a candidate reports its
// finishReason.
type geminiReader struct{}

type geminiUsage struct {
	PromptTokenCount        int `json:"promptTokenCount"`
	CachedContentTokenCount int `json:"cachedContentTokenCount"`
	CandidatesTokenCount    int `json:"candidatesTokenCount"`
	ThoughtsTokenCount      int `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int `json:"toolUsePromptTokenCount"`
}

type geminiBody struct {
	ModelVersion string `json:"modelVersion"`
	Candidates   []struct {
		Content struct {
			Parts []struct {
				FunctionCall *struct {
					ID   string          `json:"id"`
					Name string          `json:"name"`
					Args json.RawMessage `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata *geminiUsage `json:"usageMetadata"`
}

// GeminiCallID is the id a Gemini functionCall goes by: its own id, or,
// when the model gave none (ids are optional), its place k among the
// answer's calls.
func GeminiCallID(id string, k int) string {
	if id != "" {
		return id
	}
	return "gemini_call_" + strconv.Itoa(k)
}

func (u *geminiUsage) usage() provider.Usage {
	return provider.Usage{
		Input:     u.PromptTokenCount + u.ToolUsePromptTokenCount,
		Output:    u.CandidatesTokenCount + u.ThoughtsTokenCount,
		CacheRead: u.CachedContentTokenCount,
		Known:     true,
	}
}

// read takes one GenerateContentResponse: its calls are appended, its
// usage replaces the one before (cumulative), a finishReason completes it.
func (geminiReader) read(r *Reader, v *geminiBody) {
	for _, c := range v.Candidates {
		for _, p := range c.Content.Parts {
			if fc := p.FunctionCall; fc != nil {
				args := []byte(fc.Args)
				if len(args) == 0 {
					args = []byte("{}")
				}
				r.addCall(GeminiCallID(fc.ID, len(r.calls)), fc.Name, args)
			}
		}
		if c.FinishReason != "" {
			r.complete = true
		}
	}
	if v.UsageMetadata != nil {
		r.usage = v.UsageMetadata.usage()
		r.usage.Model = v.ModelVersion
	}
}

func (g geminiReader) body(r *Reader, b []byte) error {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		var vs []geminiBody
		if err := decode(b, &vs); err != nil {
			return err
		}
		for i := range vs {
			g.read(r, &vs[i])
		}
		return nil
	}
	var v geminiBody
	if err := decode(b, &v); err != nil {
		return err
	}
	g.read(r, &v)
	return nil
}

func (g geminiReader) event(r *Reader, ev Event) error {
	var v geminiBody
	if err := decode(ev.Data, &v); err != nil {
		return err
	}
	g.read(r, &v)
	return nil
}
