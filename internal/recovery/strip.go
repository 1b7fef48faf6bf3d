package recovery

import (
	"fmt"
	"strconv"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// StripOwnCalls returns the final JSON answer of the loop as the client
// receives it: the gateway's tool calls removed (the round limit was
// reached with some still asked for), the stop reason made consistent when
// no tool call remains, and, when usage is Known, the usage figures
// replaced by usage (the sum over every round, this one included), and
// the gateway's tool left out of the tools a Responses answer echoes
// (StripToolEcho). Every other byte of answer is kept; an answer without
// our calls, our tool and usage to set comes back equal to answer.
func StripOwnCalls(format provider.Format, answer []byte, usage provider.Usage) ([]byte, error) {
	if format == provider.Gemini {
		return stripGemini(answer, usage) // an answer may be a JSON array
	}
	root, err := jsonv.Parse(answer, jsonv.MaxDepth)
	if err != nil || !root.Is(jsonv.Object) {
		return nil, fmt.Errorf("%w: answer", ErrShape)
	}
	var edits []edit
	switch format {
	case provider.Chat:
		edits = stripChat(answer, root)
	case provider.Responses:
		if out := root.Get("output"); out.Is(jsonv.Array) {
			edits = filterArray(answer, out, ownOrItsReasoning(answer, out), edits)
		}
		edits = echoEdits(answer, root.Get("tools"), edits)
	case provider.Anthropic:
		edits = stripAnthropic(answer, root)
	default:
		return nil, fmt.Errorf("%w: format %q", ErrShape, format)
	}
	if usage.Known {
		edits = append(edits, usageEdits(format, answer, root.Get("usage"), usage)...)
	}
	return spliceShape(answer, edits)
}

// ownOrItsReasoning selects our calls in a Responses output and the
// reasoning items right before them: the provider refuses a reasoning item
// sent back without the item that followed it.
func ownOrItsReasoning(src []byte, output *jsonv.Node) func([]byte, *jsonv.Node) bool {
	drop := map[*jsonv.Node]bool{}
	for i, n := range output.Elems {
		if !isOwnCall(src, n) {
			continue
		}
		drop[n] = true
		for j := i - 1; j >= 0 && output.Elems[j].Get("type").StringIs(src, "reasoning"); j-- {
			drop[output.Elems[j]] = true
		}
	}
	return func(_ []byte, n *jsonv.Node) bool { return drop[n] }
}

// filterArray appends an edit that rewrites arr without the elements drop
// selects, when it selects any.
func filterArray(src []byte, arr *jsonv.Node, drop func([]byte, *jsonv.Node) bool, edits []edit) []edit {
	var kept []*jsonv.Node
	for _, n := range arr.Elems {
		if !drop(src, n) {
			kept = append(kept, n)
		}
	}
	if len(kept) == len(arr.Elems) {
		return edits
	}
	repl := append(append([]byte{'['}, joinRaw(src, kept)...), ']')
	return append(edits, edit{arr.Start, arr.End, repl})
}

func stripChat(src []byte, root *jsonv.Node) []edit {
	var edits []edit
	choices := root.Get("choices")
	if !choices.Is(jsonv.Array) {
		return nil
	}
	for _, ch := range choices.Elems {
		msg := ch.Get("message")
		tc := msg.Get("tool_calls")
		if !tc.Is(jsonv.Array) {
			continue
		}
		var kept []*jsonv.Node
		for _, c := range tc.Elems {
			if !isOwnChatCall(src, c) {
				kept = append(kept, c)
			}
		}
		if len(kept) == len(tc.Elems) {
			continue
		}
		if len(kept) > 0 {
			edits = append(edits, edit{tc.Start, tc.End, append(append([]byte{'['}, joinRaw(src, kept)...), ']')})
			continue
		}
		// No call left: the message loses tool_calls, and a finish reason
		// that announced them becomes an ordinary stop.
		edits = append(edits, edit{msg.Start, msg.End, objectWithout(src, msg, "tool_calls")})
		if fr := ch.Get("finish_reason"); fr.StringIs(src, "tool_calls") {
			edits = append(edits, edit{fr.Start, fr.End, []byte(`"stop"`)})
		}
	}
	return edits
}

func stripAnthropic(src []byte, root *jsonv.Node) []edit {
	content := root.Get("content")
	if !content.Is(jsonv.Array) {
		return nil
	}
	edits := filterArray(src, content, isOwnCall, nil)
	if len(edits) == 0 {
		return nil
	}
	for _, b := range content.Elems {
		if b.Get("type").StringIs(src, "tool_use") && !isOwnCall(src, b) {
			return edits // a client call remains: stop_reason tool_use stays true
		}
	}
	if sr := root.Get("stop_reason"); sr.StringIs(src, "tool_use") {
		edits = append(edits, edit{sr.Start, sr.End, []byte(`"end_turn"`)})
	}
	return edits
}

// objectWithout re-emits obj without member key (keys re-encoded, values
// byte for byte).
func objectWithout(src []byte, obj *jsonv.Node, key string) []byte {
	out := []byte{'{'}
	first := true
	for _, m := range obj.Members {
		if m.Key == key {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = jsonv.AppendString(out, m.Key)
		out = append(out, ':')
		out = append(out, m.Value.Raw(src)...)
	}
	return append(out, '}')
}

// usageFields are the usage members each format reports, as paths from
// the usage object, with the figure each takes from a Usage.
func usageFields(format provider.Format, u provider.Usage) []struct {
	path []string
	v    int
} {
	type f = struct {
		path []string
		v    int
	}
	switch format {
	case provider.Chat:
		return []f{{[]string{"prompt_tokens"}, u.Input}, {[]string{"completion_tokens"}, u.Output},
			{[]string{"total_tokens"}, u.Input + u.Output}, {[]string{"prompt_tokens_details", "cached_tokens"}, u.CacheRead}}
	case provider.Responses:
		return []f{{[]string{"input_tokens"}, u.Input}, {[]string{"output_tokens"}, u.Output},
			{[]string{"total_tokens"}, u.Input + u.Output}, {[]string{"input_tokens_details", "cached_tokens"}, u.CacheRead}}
	case provider.Anthropic:
		return []f{{[]string{"input_tokens"}, u.Input - u.CacheRead - u.CacheWrite}, {[]string{"output_tokens"}, u.Output},
			{[]string{"cache_read_input_tokens"}, u.CacheRead}, {[]string{"cache_creation_input_tokens"}, u.CacheWrite}}
	}
	return nil
}

// usageEdits sets the usage figures present in obj (a usage object) to u's;
// figures the provider did not report are not added.
func usageEdits(format provider.Format, src []byte, obj *jsonv.Node, u provider.Usage) []edit {
	if !obj.Is(jsonv.Object) {
		return nil
	}
	var edits []edit
	for _, f := range usageFields(format, u) {
		n := obj
		for _, k := range f.path {
			n = n.Get(k)
		}
		if n.Is(jsonv.Number) {
			edits = append(edits, edit{n.Start, n.End, strconv.AppendInt(nil, int64(f.v), 10)})
		}
	}
	return edits
}
