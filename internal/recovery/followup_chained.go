package recovery

import (
	"fmt"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// notRunOutput answers a client call made in the same round as a call of
// the gateway's tool: the client never saw that call, so nothing ran it,
// and the model asks for it again once it has what it recovered.
const notRunOutput = `{"error":"not run: call it again if it is still needed"}`

// FollowUpChained returns the next request of the recovery loop as a
// continuation of the provider's response id (a Responses round over the
// WebSocket): request's members unchanged except previous_response_id,
// set to id, and input, which holds only an output for every call of
// answer (the round's answer as Round.Answer assembles it). Calls of the
// gateway's tool get their Result from calls; calls of the client's tools
// get an output saying they were not run.
//
// Chained rather than FollowUp's whole request: with store=false (Codex)
// the socket keeps only its most recent response in memory, so the round's
// own id is the one state a follow-up can name, and it already holds the
// round's output; every call in it needs an output, or the request is
// refused, the client's calls included.
func FollowUpChained(request []byte, id string, answer []byte, calls []Call) ([]byte, error) {
	req, err := jsonv.Parse(request, jsonv.MaxDepth)
	if err != nil || !req.Is(jsonv.Object) || id == "" {
		return nil, fmt.Errorf("%w: request", ErrShape)
	}
	ans, err := jsonv.Parse(answer, jsonv.MaxDepth)
	if err != nil || !ans.Is(jsonv.Object) || !ans.Get("output").Is(jsonv.Array) {
		return nil, fmt.Errorf("%w: answer", ErrShape)
	}
	results := make(map[string][]byte, len(calls))
	for _, c := range calls {
		results[c.ID] = c.Result
	}
	input := []byte{'['}
	own := 0
	for _, it := range ans.Get("output").Elems {
		kind := "function_call_output"
		switch {
		case it.Get("type").StringIs(answer, "custom_tool_call"):
			kind = "custom_tool_call_output"
		case !it.Get("type").StringIs(answer, "function_call"):
			continue
		}
		cid := it.Get("call_id")
		s, ok := cid.Text(answer)
		if !ok {
			return nil, fmt.Errorf("%w: a call without an id", ErrShape)
		}
		out := []byte(notRunOutput)
		if isOwnCall(answer, it) {
			r, ok := results[s]
			if !ok || r == nil {
				return nil, fmt.Errorf("recovery: no result for call %q", s)
			}
			out, own = r, own+1
		}
		if len(input) > 1 {
			input = append(input, ',')
		}
		input = append(input, `{"type":"`...)
		input = append(input, kind...)
		input = append(input, `","call_id":`...)
		input = append(input, cid.Raw(answer)...)
		input = append(input, `,"output":`...)
		input = jsonv.AppendString(input, string(out))
		input = append(input, '}')
	}
	if own == 0 {
		return nil, ErrNoOwnCalls
	}
	input = append(input, ']')
	set := []member{{"previous_response_id", jsonv.AppendString(nil, id)}, {"input", input}}
	return spliceShape(request, setMembersEdits(req, set))
}
