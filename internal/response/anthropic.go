package response

import (
	"bytes"
	"encoding/json"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Anthropic Messages: a body's content[] blocks of type tool_use and its
// usage; in a stream, message_start carries the input usage,
// content_block_start opens a tool_use block whose input arrives as
// input_json_delta pieces, and message_delta carries the output usage
// (cumulative; newer API versions repeat the input fields there too).
type anthropicReader struct{}

type anthropicUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
	// CacheCreation splits the written tokens by TTL (newer API
	// versions); only the 1-hour part is kept, as it is billed at 2x.
	CacheCreation *struct {
		Ephemeral1h *int `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
}

type anthropicBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

type anthropicBody struct {
	Model   string           `json:"model"`
	Content []anthropicBlock `json:"content"`
	Usage   *anthropicUsage  `json:"usage"`
}

type anthropicEvent struct {
	Type         string          `json:"type"`
	Index        int             `json:"index"`
	Message      *anthropicBody  `json:"message"`
	ContentBlock *anthropicBlock `json:"content_block"`
	Delta        *struct {
		Type        string `json:"type"`
		PartialJSON string `json:"partial_json"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
}

// apply merges reported fields into u; fields absent keep their value.
// Usage.Input is the billed input: uncached + cache read + cache write.
func (a *anthropicUsage) apply(u provider.Usage) provider.Usage {
	in := u.Input - u.CacheRead - u.CacheWrite
	if a.InputTokens != nil {
		in = *a.InputTokens
	}
	if a.CacheReadInputTokens != nil {
		u.CacheRead = *a.CacheReadInputTokens
	}
	if a.CacheCreationInputTokens != nil {
		u.CacheWrite = *a.CacheCreationInputTokens
	}
	if a.CacheCreation != nil && a.CacheCreation.Ephemeral1h != nil {
		u.CacheWrite1h = min(*a.CacheCreation.Ephemeral1h, u.CacheWrite)
	}
	if a.OutputTokens != nil {
		u.Output = *a.OutputTokens
	}
	u.Input = in + u.CacheRead + u.CacheWrite
	u.Known = true
	return u
}

func (anthropicReader) body(r *Reader, b []byte) error {
	var v anthropicBody
	if err := decode(b, &v); err != nil {
		return err
	}
	for _, bl := range v.Content {
		if bl.Type == "tool_use" {
			r.addCall(bl.ID, bl.Name, bl.Input)
		}
	}
	if v.Usage != nil {
		r.usage = v.Usage.apply(provider.Usage{Model: v.Model})
	}
	return nil
}

// anthropicSkip are the events (by SSE event name, which Anthropic always
// sends) that carry nothing the reader keeps: the bulk of a stream.
var anthropicSkip = map[string]bool{"ping": true, "message_stop": true}

func (anthropicReader) event(r *Reader, ev Event) error {
	if ev.Name == "message_stop" {
		r.complete = true
	}
	if anthropicSkip[ev.Name] || ev.Name == "content_block_delta" && !bytes.Contains(ev.Data, []byte("input_json_delta")) &&
		!bytes.Contains(ev.Data, []byte(`\u`)) {
		return validJSON(ev.Data)
	}
	var v anthropicEvent
	if err := decode(ev.Data, &v); err != nil {
		return err
	}
	switch v.Type {
	case "message_start":
		if v.Message != nil && v.Message.Usage != nil {
			r.usage = v.Message.Usage.apply(provider.Usage{Model: v.Message.Model})
		}
	case "message_delta":
		if v.Usage != nil {
			r.usage = v.Usage.apply(r.usage)
		}
	case "content_block_start":
		if b := v.ContentBlock; b != nil && b.Type == "tool_use" {
			c := r.streamCall(v.Index)
			c.ID, c.Name = b.ID, b.Name
			if r.keeps(b.Name) {
				if r.startInput == nil {
					r.startInput = map[int][]byte{}
				}
				r.startInput[v.Index] = bytes.Clone(b.Input)
			}
		}
	case "content_block_delta":
		if v.Delta != nil && v.Delta.Type == "input_json_delta" {
			if i, ok := r.byKey[v.Index]; ok {
				r.appendArgs(&r.calls[i], v.Delta.PartialJSON)
			}
		}
	case "content_block_stop":
		// Without deltas (or only empty ones) the start's input is the
		// whole input.
		if in, ok := r.startInput[v.Index]; ok {
			if i, ok := r.byKey[v.Index]; ok && len(r.calls[i].Arguments) == 0 {
				r.calls[i].Arguments = in
			}
			delete(r.startInput, v.Index)
		}
	}
	return nil
}
