package recovery

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// ErrNoOwnCalls means the answer holds no call of the gateway's tool.
var ErrNoOwnCalls = errors.New("recovery: the answer calls no " + ToolName)

// FollowUp returns the next request of the recovery loop: request's bytes
// unchanged, with the answer's assistant turn and the results of the
// gateway's calls appended to its messages (Chat, Anthropic) or input
// (Responses) in the format's shape. answer is the provider's answer as a
// JSON body (a streamed answer as Round.Answer assembles it); calls holds a
// Result for every call of the gateway's tool in it.
//
// The appended assistant turn keeps everything the model said (text,
// reasoning and thinking blocks byte for byte) except calls of the client's
// tools: the client did not see them and cannot answer them, and a call
// without its result is a 400 at every provider. The model asks for them
// again once it has what it recovered.
func FollowUp(format provider.Format, request, answer []byte, calls []Call) ([]byte, error) {
	if format == provider.Gemini {
		return followUpGemini(request, answer, calls) // an answer may be a JSON array
	}
	req, err := jsonv.Parse(request, jsonv.MaxDepth)
	if err != nil || !req.Is(jsonv.Object) {
		return nil, fmt.Errorf("%w: request", ErrShape)
	}
	ans, err := jsonv.Parse(answer, jsonv.MaxDepth)
	if err != nil || !ans.Is(jsonv.Object) {
		return nil, fmt.Errorf("%w: answer", ErrShape)
	}
	results := make(map[string][]byte, len(calls))
	for _, c := range calls {
		results[c.ID] = c.Result
	}
	result := func(id *jsonv.Node) ([]byte, error) {
		s, ok := id.Text(answer)
		if !ok {
			return nil, fmt.Errorf("%w: a call without an id", ErrShape)
		}
		r, ok := results[s]
		if !ok || r == nil {
			return nil, fmt.Errorf("recovery: no result for call %q", s)
		}
		return jsonv.AppendString(nil, string(r)), nil
	}
	switch format {
	case provider.Chat:
		return followUpChat(request, req, answer, ans, result)
	case provider.Responses:
		return followUpResponses(request, req, answer, ans, result)
	case provider.Anthropic:
		return followUpAnthropic(request, req, answer, ans, result)
	}
	return nil, fmt.Errorf("%w: format %q", ErrShape, format)
}

// resultFunc returns a call's result, id given as its JSON string node, as
// a JSON string literal.
type resultFunc func(id *jsonv.Node) ([]byte, error)

// isOwnChatCall reports whether a Chat tool_calls element calls our tool.
func isOwnChatCall(src []byte, c *jsonv.Node) bool {
	return c.Get("function").Get("name").StringIs(src, ToolName)
}

func followUpChat(request []byte, req *jsonv.Node, answer []byte, ans *jsonv.Node, result resultFunc) ([]byte, error) {
	msgs := req.Get("messages")
	choices := ans.Get("choices")
	if !msgs.Is(jsonv.Array) || !choices.Is(jsonv.Array) || len(choices.Elems) == 0 {
		return nil, ErrShape
	}
	msg := choices.Elems[0].Get("message")
	var own []*jsonv.Node
	if tc := msg.Get("tool_calls"); tc.Is(jsonv.Array) {
		for _, c := range tc.Elems {
			if isOwnChatCall(answer, c) {
				own = append(own, c)
			}
		}
	}
	if len(own) == 0 {
		return nil, ErrNoOwnCalls
	}
	content := []byte("null")
	if c := msg.Get("content"); c != nil {
		content = c.Raw(answer)
	}
	out := []byte(`{"role":"assistant","content":`)
	out = append(out, content...)
	out = append(out, `,"tool_calls":[`...)
	out = append(out, joinRaw(answer, own)...)
	out = append(out, "]}"...)
	for _, c := range own {
		r, err := result(c.Get("id"))
		if err != nil {
			return nil, err
		}
		out = append(out, `,{"role":"tool","tool_call_id":`...)
		out = append(out, c.Get("id").Raw(answer)...)
		out = append(out, `,"content":`...)
		out = append(out, r...)
		out = append(out, '}')
	}
	return appendElems(request, msgs, out)
}

// isClientCall reports whether a Responses output item or an Anthropic
// content block is a call of one of the client's tools.
func isClientCall(src []byte, n *jsonv.Node) bool {
	switch {
	case n.Get("type").StringIs(src, "function_call"), n.Get("type").StringIs(src, "tool_use"):
		return !n.Get("name").StringIs(src, ToolName)
	case n.Get("type").StringIs(src, "custom_tool_call"):
		return true
	}
	return false
}

func isOwnCall(src []byte, n *jsonv.Node) bool {
	return (n.Get("type").StringIs(src, "function_call") || n.Get("type").StringIs(src, "tool_use")) &&
		n.Get("name").StringIs(src, ToolName)
}

// split returns the elements of arr that are not client calls, and our
// calls. In a Responses output the reasoning items right before a client
// call go with it: the provider refuses a reasoning item whose following
// item is missing.
func split(src []byte, arr *jsonv.Node) (kept, own []*jsonv.Node) {
	drop := make([]bool, len(arr.Elems))
	for i, n := range arr.Elems {
		if !isClientCall(src, n) {
			continue
		}
		drop[i] = true
		for j := i - 1; j >= 0 && arr.Elems[j].Get("type").StringIs(src, "reasoning"); j-- {
			drop[j] = true
		}
	}
	for i, n := range arr.Elems {
		if isOwnCall(src, n) {
			own = append(own, n)
		}
		if !drop[i] {
			kept = append(kept, n)
		}
	}
	return kept, own
}

func followUpResponses(request []byte, req *jsonv.Node, answer []byte, ans *jsonv.Node, result resultFunc) ([]byte, error) {
	input, output := req.Get("input"), ans.Get("output")
	if !output.Is(jsonv.Array) || !(input.Is(jsonv.Array) || input.Is(jsonv.String)) {
		return nil, ErrShape
	}
	kept, own := split(answer, output)
	if len(own) == 0 {
		return nil, ErrNoOwnCalls
	}
	out := joinRaw(answer, kept)
	for _, c := range own {
		r, err := result(c.Get("call_id"))
		if err != nil {
			return nil, err
		}
		out = append(out, `,{"type":"function_call_output","call_id":`...)
		out = append(out, c.Get("call_id").Raw(answer)...)
		out = append(out, `,"output":`...)
		out = append(out, r...)
		out = append(out, '}')
	}
	if input.Is(jsonv.String) {
		// A string input is one user message; it becomes the first item of
		// the list the turn is appended to.
		list := append([]byte(`[{"role":"user","content":`), input.Raw(request)...)
		list = append(append(append(list, "},"...), out...), ']')
		return spliceShape(request, []edit{{input.Start, input.End, list}})
	}
	return appendElems(request, input, out)
}

func followUpAnthropic(request []byte, req *jsonv.Node, answer []byte, ans *jsonv.Node, result resultFunc) ([]byte, error) {
	msgs, content := req.Get("messages"), ans.Get("content")
	if !msgs.Is(jsonv.Array) || !content.Is(jsonv.Array) {
		return nil, ErrShape
	}
	kept, own := split(answer, content)
	if len(own) == 0 {
		return nil, ErrNoOwnCalls
	}
	out := []byte(`{"role":"assistant","content":[`)
	out = append(out, joinRaw(answer, kept)...)
	out = append(out, `]},{"role":"user","content":[`...)
	for i, c := range own {
		r, err := result(c.Get("id"))
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"type":"tool_result","tool_use_id":`...)
		out = append(out, c.Get("id").Raw(answer)...)
		out = append(out, `,"content":`...)
		out = append(out, r...)
		if bytes.HasPrefix(r, []byte(`"{\"error\":`)) {
			out = append(out, `,"is_error":true`...) // the model reads it as a failed call
		}
		out = append(out, '}')
	}
	out = append(out, "]}"...)
	return appendElems(request, msgs, out)
}
