package response

import (
	"bytes"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// OpenAI Chat Completions: a body's choices[].message.tool_calls, or a
// stream of chat.completion.chunk objects whose choices[].delta.tool_calls
// arrive in pieces keyed by index (id and name in the first piece, the
// arguments string split across all). Usage is the body's usage, or in a
// stream the final chunk's (sent with stream_options.include_usage).
type chatReader struct{}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type chatToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatMessage struct {
	ToolCalls []chatToolCall `json:"tool_calls"`
}

type chatBody struct {
	Model   string `json:"model"`
	Choices []struct {
		Index   int         `json:"index"`
		Message chatMessage `json:"message"`
		Delta   chatMessage `json:"delta"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

func (u *chatUsage) usage() provider.Usage {
	out := provider.Usage{Input: u.PromptTokens, Output: u.CompletionTokens, Known: true}
	if u.PromptTokensDetails != nil {
		out.CacheRead = u.PromptTokensDetails.CachedTokens
	}
	return out
}

func (chatReader) body(r *Reader, b []byte) error {
	var v chatBody
	if err := decode(b, &v); err != nil {
		return err
	}
	for _, ch := range v.Choices {
		for _, tc := range ch.Message.ToolCalls {
			r.addCall(tc.ID, tc.Function.Name, []byte(tc.Function.Arguments))
		}
	}
	if v.Usage != nil {
		r.usage = v.Usage.usage()
		r.usage.Model = v.Model
	}
	return nil
}

var chatDone = []byte("[DONE]")

func (chatReader) event(r *Reader, ev Event) error {
	if bytes.Equal(bytes.TrimSpace(ev.Data), chatDone) {
		r.complete = true
		return nil
	}
	// Most chunks carry a piece of text: decoding them would find nothing.
	// A chunk needs reading only if it names tool_calls or holds a usage
	// object; one with a \u escape is read anyway (a key could be spelled
	// with escapes).
	if !bytes.Contains(ev.Data, []byte(`"tool_calls"`)) && !bytes.Contains(ev.Data, []byte(`"prompt_tokens"`)) &&
		!bytes.Contains(ev.Data, []byte(`\u`)) {
		return validJSON(ev.Data)
	}
	var v chatBody
	if err := decode(ev.Data, &v); err != nil {
		return err
	}
	for _, ch := range v.Choices {
		for _, tc := range ch.Delta.ToolCalls {
			c := r.streamCall(ch.Index<<16 | tc.Index&0xffff)
			if tc.ID != "" {
				c.ID = tc.ID
			}
			if tc.Function.Name != "" {
				c.Name += tc.Function.Name
			}
			r.appendArgs(c, tc.Function.Arguments)
		}
	}
	if v.Usage != nil {
		r.usage = v.Usage.usage()
		r.usage.Model = v.Model
	}
	return nil
}
