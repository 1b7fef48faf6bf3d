// Package recoverytest is the scripted model that the recovery tests (the
// package's own and the integration tests through Caddy) put behind a fake
// provider. It imports nothing of package recovery, so recovery's
// in-package tests can use it too.
package recoverytest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// ToolName is the gateway's recovery tool, as recovery.ToolName (recovery's
// tests check the two agree).
const ToolName = "token_terminator"

// Model is a scripted model behind a fake provider. Until the request
// carries Rounds results of the gateway's tool it asks for the next page of
// artifact ID (PageChars characters a page), after a short text; then it
// answers with the recovered text, read back out of the request. With
// Mixed, each answer also calls the client's bash tool (the client must see
// it only in the final answer).
type Model struct {
	Format    provider.Format
	ID        string
	Rounds    int
	Mixed     bool
	PageChars int // characters asked for per page; 0 means 10
	// Args, when set, are the tool's arguments of round k (Args[k])
	// instead of the next page of ID: a model that searches, or asks for
	// ids it was not given.
	Args []string
}

func (m Model) page() int {
	if m.PageChars > 0 {
		return m.PageChars
	}
	return 10
}

type call struct{ id, name, args string }

// Text is a turn that only answers with text.
func Text(text string, usage provider.Usage) Turn { return Turn{text: text, usage: usage} }

// Turn is one answer of the model: render it with Body (JSON) or Stream (SSE).
type Turn struct {
	text  string
	calls []call
	usage provider.Usage
	tools string // Responses: the request's tools as the provider echoes them; "" for none
}

// Echo returns t answering request: a Responses answer echoes the
// request's tools in its response objects, as the provider does
// (re-serialised: keys sorted, function tools given "strict"), so the
// bytes differ from the request's.
func (t Turn) Echo(request []byte) Turn {
	var v struct {
		Tools []map[string]any `json:"tools"`
	}
	if json.Unmarshal(request, &v) != nil || v.Tools == nil {
		return t
	}
	for _, tool := range v.Tools {
		if _, ok := tool["strict"]; !ok && tool["type"] == "function" {
			tool["strict"] = false
		}
	}
	b, _ := json.Marshal(v.Tools)
	t.tools = string(b)
	return t
}

// WithUsage returns t reporting usage u (a fake provider's simulated
// prompt cache, say).
func (t Turn) WithUsage(u provider.Usage) Turn {
	t.usage = u
	return t
}

// echo is the tools member of a Responses response object ("" for none).
func (t Turn) echo() string {
	if t.tools == "" {
		return ""
	}
	return `,"tools":` + t.tools
}

// Answer decides the model's next turn from the request (echoing its tools,
// see Echo).
func (m Model) Answer(request []byte) (Turn, error) {
	if err := CheckRequest(m.Format, request); err != nil {
		return Turn{}, err
	}
	results := OwnResults(m.Format, request)
	k := len(results)
	t := Turn{usage: provider.Usage{Input: 1000 + 100*k, CacheRead: 500, Output: 20 + k, Known: true}}.Echo(request)
	if m.Format == provider.Anthropic {
		t.usage.CacheWrite = 10
		t.usage.Input += 10
	}
	if m.Mixed {
		t.calls = append(t.calls, call{fmt.Sprintf("client_%d", k), "bash", `{"cmd":"ls"}`})
	}
	if k < m.Rounds {
		t.text = fmt.Sprintf("Looking (%d).", k)
		args := fmt.Sprintf(`{"action":"artifact_get","artifact_id":%q,"offset":%d,"limit":%d}`, m.ID, m.page()*k, m.page())
		if k < len(m.Args) {
			args = m.Args[k]
		}
		t.calls = append([]call{{fmt.Sprintf("tt_%d", k), ToolName, args}}, t.calls...)
		return t, nil
	}
	var got strings.Builder
	for _, r := range results {
		var p struct{ Content string }
		if err := json.Unmarshal([]byte(r), &p); err != nil {
			return Turn{}, fmt.Errorf("tool result %q: %v", r, err)
		}
		got.WriteString(p.Content)
	}
	t.text = "recovered: " + got.String()
	return t, nil
}

// OwnResults returns the contents of the results of the gateway's tool in
// a request, in order.
func OwnResults(format provider.Format, body []byte) []string {
	var v struct {
		Messages []map[string]any `json:"messages"`
		Input    json.RawMessage  `json:"input"`
	}
	json.Unmarshal(body, &v)
	var out []string
	switch format {
	case provider.Chat:
		for _, m := range v.Messages {
			if m["role"] == "tool" && strings.HasPrefix(fmt.Sprint(m["tool_call_id"]), "tt_") {
				out = append(out, m["content"].(string))
			}
		}
	case provider.Responses:
		var items []map[string]any
		json.Unmarshal(v.Input, &items)
		for _, it := range items {
			if it["type"] == "function_call_output" && strings.HasPrefix(fmt.Sprint(it["call_id"]), "tt_") {
				out = append(out, it["output"].(string))
			}
		}
	case provider.Anthropic:
		for _, m := range v.Messages {
			blocks, _ := m["content"].([]any)
			for _, b := range blocks {
				bm, _ := b.(map[string]any)
				if bm["type"] == "tool_result" && strings.HasPrefix(fmt.Sprint(bm["tool_use_id"]), "tt_") {
					out = append(out, bm["content"].(string))
				}
			}
		}
	}
	return out
}

// CheckRequest enforces what the providers enforce (with a 400): every tool
// call answered by a result (Anthropic: in the next message), no result
// without its call, the gateway's tool defined exactly once.
func CheckRequest(format provider.Format, body []byte) error {
	var v struct {
		Messages []map[string]any `json:"messages"`
		Input    json.RawMessage  `json:"input"`
		Tools    []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("400: %v", err)
	}
	defs := 0
	for _, t := range v.Tools {
		fn, _ := t["function"].(map[string]any)
		if t["name"] == ToolName || fn["name"] == ToolName {
			defs++
		}
	}
	if defs != 1 {
		return fmt.Errorf("400: %d definitions of %s", defs, ToolName)
	}
	calls, results := map[string]int{}, map[string]int{}
	var err error
	switch format {
	case provider.Chat:
		err = chatCalls(v.Messages, calls, results)
	case provider.Responses:
		err = responsesCalls(v.Input, calls, results)
	case provider.Anthropic:
		err = anthropicCalls(v.Messages, calls, results)
	}
	if err != nil {
		return err
	}
	// Ids may be reused across turns (some providers number them per turn:
	// functions.bash:0), so calls and results are counted per id.
	for id, n := range calls {
		if n != results[id] {
			return fmt.Errorf("400: call %s: %d calls, %d results", id, n, results[id])
		}
	}
	for id := range results {
		if calls[id] == 0 {
			return fmt.Errorf("400: result %s without a call", id)
		}
	}
	return nil
}

// chatCalls counts the tool calls and results of Chat messages; a result
// before its call is an error.
func chatCalls(msgs []map[string]any, calls, results map[string]int) error {
	for _, m := range msgs {
		tcs, _ := m["tool_calls"].([]any)
		for _, tc := range tcs {
			calls[fmt.Sprint(tc.(map[string]any)["id"])]++
		}
		if m["role"] == "tool" {
			id := fmt.Sprint(m["tool_call_id"])
			if calls[id] == 0 {
				return fmt.Errorf("400: tool result %s before its call", id)
			}
			results[id]++
		}
	}
	return nil
}

// responsesCalls counts the function calls and outputs of Responses input
// items; an output before its call is an error.
func responsesCalls(input json.RawMessage, calls, results map[string]int) error {
	var items []map[string]any
	if err := json.Unmarshal(input, &items); err != nil {
		return fmt.Errorf("400: input: %v", err)
	}
	for _, it := range items {
		switch it["type"] {
		case "function_call":
			calls[fmt.Sprint(it["call_id"])]++
		case "function_call_output":
			id := fmt.Sprint(it["call_id"])
			if calls[id] == 0 {
				return fmt.Errorf("400: output %s before its call", id)
			}
			results[id]++
		}
	}
	return nil
}

// anthropicCalls counts the tool_use and tool_result blocks of Messages;
// a tool_use not answered in the next message is an error.
func anthropicCalls(msgs []map[string]any, calls, results map[string]int) error {
	for i, m := range msgs {
		blocks, _ := m["content"].([]any)
		for _, b := range blocks {
			bm, _ := b.(map[string]any)
			switch bm["type"] {
			case "tool_use":
				id := fmt.Sprint(bm["id"])
				calls[id]++
				if i+1 >= len(msgs) || !hasResult(msgs[i+1], id) {
					return fmt.Errorf("400: tool_use %s without tool_result immediately after", id)
				}
			case "tool_result":
				results[fmt.Sprint(bm["tool_use_id"])]++
			}
		}
	}
	return nil
}

func hasResult(m map[string]any, id string) bool {
	blocks, _ := m["content"].([]any)
	for _, b := range blocks {
		if bm, _ := b.(map[string]any); bm["type"] == "tool_result" && bm["tool_use_id"] == id {
			return true
		}
	}
	return false
}

func jsq(s string) string { b, _ := json.Marshal(s); return string(b) }

// body renders a turn as the provider's JSON answer.
func (t Turn) Body(format provider.Format, round int) []byte {
	var b strings.Builder
	switch format {
	case provider.Chat:
		fmt.Fprintf(&b, `{"id":"chatcmpl-%d","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":%s`, round, jsq(t.text))
		if len(t.calls) > 0 {
			b.WriteString(`,"tool_calls":[`)
			for i, c := range t.calls {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}`, c.id, c.name, jsq(c.args))
			}
			b.WriteString(`]},"finish_reason":"tool_calls"}]`)
		} else {
			b.WriteString(`},"finish_reason":"stop"}]`)
		}
		fmt.Fprintf(&b, `,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			t.usage.Input, t.usage.Output, t.usage.Input+t.usage.Output, t.usage.CacheRead)
	case provider.Responses:
		fmt.Fprintf(&b, `{"id":"resp_%d","object":"response","status":"completed","output":[%s,%s`, round, t.responsesMessage(round), responsesReasoning(round))
		for i, c := range t.calls {
			fmt.Fprintf(&b, `,%s`, c.responsesItem(round, i))
		}
		fmt.Fprintf(&b, `]%s,"usage":%s}`, t.echo(), t.responsesUsage())
	case provider.Anthropic:
		fmt.Fprintf(&b, `{"id":"msg_%d","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":%s}`, round, jsq(t.text))
		for _, c := range t.calls {
			fmt.Fprintf(&b, `,{"type":"tool_use","id":%q,"name":%q,"input":%s}`, c.id, c.name, c.args)
		}
		fmt.Fprintf(&b, `],"stop_reason":%q,"stop_sequence":null,"usage":%s}`, t.stopReason(), t.anthropicUsage(true))
	}
	return []byte(b.String())
}

func (t Turn) stopReason() string {
	if len(t.calls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func (t Turn) anthropicUsage(withOutput bool) string {
	out := 1
	if withOutput {
		out = t.usage.Output
	}
	return fmt.Sprintf(`{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}`,
		t.usage.Input-t.usage.CacheRead-t.usage.CacheWrite, t.usage.CacheWrite, t.usage.CacheRead, out)
}

func (t Turn) responsesUsage() string {
	return fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`,
		t.usage.Input, t.usage.CacheRead, t.usage.Output, t.usage.Input+t.usage.Output)
}

func (t Turn) responsesMessage(round int) string {
	return fmt.Sprintf(`{"id":"msg_%d","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":%s}]}`, round, jsq(t.text))
}

// responsesReasoning is the reasoning item each answer carries between its
// message and its calls.
func responsesReasoning(round int) string {
	return fmt.Sprintf(`{"id":"rs_%d","type":"reasoning","summary":[],"encrypted_content":"enc%d"}`, round, round)
}

func (c call) responsesItem(round, i int) string {
	return fmt.Sprintf(`{"id":"fc_%d_%d","type":"function_call","status":"completed","arguments":%s,"call_id":%q,"name":%q}`, round, i, jsq(c.args), c.id, c.name)
}

// halves splits s in two, so every stream carries text in several deltas.
func halvesOf(s string) [2]string { n := len(s) / 2; return [2]string{s[:n], s[n:]} }

// stream renders a turn as the provider's SSE stream.
func (t Turn) Stream(format provider.Format, round int) []byte {
	var b strings.Builder
	ev := func(name, data string) {
		if name != "" {
			fmt.Fprintf(&b, "event: %s\n", name)
		}
		fmt.Fprintf(&b, "data: %s\n\n", data)
	}
	switch format {
	case provider.Anthropic:
		t.anthropicStream(ev, round)
	case provider.Chat:
		t.chatStream(ev, round)
	case provider.Responses:
		t.responsesStream(ev, round)
	}
	return []byte(b.String())
}

// sseFunc writes one server-sent event (no event line when name is empty).
type sseFunc func(name, data string)

// anthropicStream writes the turn as a Messages stream's events.
func (t Turn) anthropicStream(ev sseFunc, round int) {
	ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_%d","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":%s}}`, round, t.anthropicUsage(false)))
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	ev("ping", `{"type": "ping"}`)
	for _, h := range halvesOf(t.text) {
		ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}`, jsq(h)))
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	for i, c := range t.calls {
		ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, i+1, c.id, c.name))
		ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":""}}`, i+1))
		for _, h := range halvesOf(c.args) {
			ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i+1, jsq(h)))
		}
		ev("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i+1))
	}
	ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, t.stopReason(), t.usage.Output))
	ev("message_stop", `{"type":"message_stop"}`)
}

// chatStream writes the turn as a Chat Completions stream's chunks.
func (t Turn) chatStream(ev sseFunc, round int) {
	chunk := func(delta, finish, usage string) {
		ev("", fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion.chunk","created":1733000000,"model":"gpt-4o","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}],"usage":%s}`, round, delta, finish, usage))
	}
	chunk(`{"role":"assistant","content":"","refusal":null}`, "null", "null")
	for _, h := range halvesOf(t.text) {
		chunk(fmt.Sprintf(`{"content":%s}`, jsq(h)), "null", "null")
	}
	for i, c := range t.calls {
		chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}]}`, i, c.id, c.name), "null", "null")
		for _, h := range halvesOf(c.args) {
			chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, i, jsq(h)), "null", "null")
		}
	}
	finish := `"stop"`
	if len(t.calls) > 0 {
		finish = `"tool_calls"`
	}
	chunk(`{}`, finish, "null")
	ev("", fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion.chunk","created":1733000000,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		round, t.usage.Input, t.usage.Output, t.usage.Input+t.usage.Output, t.usage.CacheRead))
	ev("", "[DONE]")
}

// responsesStream writes the turn as a Responses stream's events.
func (t Turn) responsesStream(ev sseFunc, round int) {
	seq := 0
	rev := func(name, data string) {
		ev(name, fmt.Sprintf(`{"type":%q,"sequence_number":%d,%s}`, name, seq, data))
		seq++
	}
	shell := fmt.Sprintf(`"response":{"id":"resp_%d","object":"response","status":"in_progress","output":[]%s,"usage":null}`, round, t.echo())
	rev("response.created", shell)
	rev("response.in_progress", shell)
	msgID := fmt.Sprintf("msg_%d", round)
	rev("response.output_item.added", fmt.Sprintf(`"output_index":0,"item":{"id":%q,"type":"message","status":"in_progress","role":"assistant","content":[]}`, msgID))
	rev("response.content_part.added", fmt.Sprintf(`"item_id":%q,"output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}`, msgID))
	for _, h := range halvesOf(t.text) {
		rev("response.output_text.delta", fmt.Sprintf(`"item_id":%q,"output_index":0,"content_index":0,"delta":%s`, msgID, jsq(h)))
	}
	rev("response.output_text.done", fmt.Sprintf(`"item_id":%q,"output_index":0,"content_index":0,"text":%s`, msgID, jsq(t.text)))
	rev("response.output_item.done", fmt.Sprintf(`"output_index":0,"item":%s`, t.responsesMessage(round)))
	rev("response.output_item.added", fmt.Sprintf(`"output_index":1,"item":{"id":"rs_%d","type":"reasoning","summary":[]}`, round))
	rev("response.output_item.done", fmt.Sprintf(`"output_index":1,"item":%s`, responsesReasoning(round)))
	items := []string{t.responsesMessage(round), responsesReasoning(round)}
	for i, c := range t.calls {
		i := i + 1 // after the message and the reasoning item
		fcID := fmt.Sprintf("fc_%d_%d", round, i)
		rev("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":{"id":%q,"type":"function_call","status":"in_progress","arguments":"","call_id":%q,"name":%q}`, i+1, fcID, c.id, c.name))
		for _, h := range halvesOf(c.args) {
			rev("response.function_call_arguments.delta", fmt.Sprintf(`"item_id":%q,"output_index":%d,"delta":%s`, fcID, i+1, jsq(h)))
		}
		rev("response.function_call_arguments.done", fmt.Sprintf(`"item_id":%q,"output_index":%d,"arguments":%s`, fcID, i+1, jsq(c.args)))
		rev("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, i+1, c.responsesItem(round, i)))
		items = append(items, c.responsesItem(round, i))
	}
	rev("response.completed", fmt.Sprintf(`"response":{"id":"resp_%d","object":"response","status":"completed","output":[%s]%s,"usage":%s}`, round, strings.Join(items, ","), t.echo(), t.responsesUsage()))
}
