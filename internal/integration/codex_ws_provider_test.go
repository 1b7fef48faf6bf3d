package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// This file holds the scripted agent provider's Responses WebSocket side,
// as the Responses API's WebSocket mode behaves: each response.create
// message is answered on its socket by the events an HTTPS stream carries,
// one message each; previous_response_id resolves only against responses
// produced on the same connection (an unknown id is answered with an
// error event, previous_response_not_found, as the API does); usage is
// billed on the whole history the message stands for (the responses it
// continues plus its input), through the session's simulated prompt cache.
// With a recovering model it also plays a model that calls the gateway's
// tool for a receipt it was sent, and continues the script once the
// tool's result is in its history.

// wsMessage is one text message the provider received over a socket.
type wsMessage struct {
	Socket int    // the socket's number, in the order they opened
	Body   []byte // the message as it arrived
	Create bool   // a response.create
}

// wsAgentProvider is the scripted provider's WebSocket front: requests
// that are not upgrades go to the HTTPS provider p as they are.
type wsAgentProvider struct {
	*httptest.Server
	p       *agentProvider
	recover *wsRecovering // nil: the model never calls the gateway's tool

	mu      sync.Mutex
	sockets int
	msgs    []wsMessage
	billed  [][]byte // the whole Responses body of each answered create (warm-ups left out), in order
	refused int      // creates answered previous_response_not_found
}

// newWSAgentProvider serves p's script over the Responses WebSocket;
// recovering, when set, is the model that calls the gateway's tool.
func newWSAgentProvider(t *testing.T, p *agentProvider, recovering *wsRecovering) *wsAgentProvider {
	w := &wsAgentProvider{p: p, recover: recovering}
	inner := p.Server.Config.Handler
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			inner.ServeHTTP(rw, r)
			return
		}
		conn, brw, ok := fakeprovider.Upgrade(rw, r.Header.Get("Sec-WebSocket-Key"))
		if !ok {
			return
		}
		defer conn.Close()
		w.mu.Lock()
		w.sockets++
		c := &wsConversation{w: w, socket: w.sockets, path: r.URL.Path, header: r.Header.Clone(), inner: inner}
		w.mu.Unlock()
		c.send = func(p []byte) error {
			_, err := conn.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, false, [4]byte{}, p))
			return err
		}
		fakeprovider.ServeFrames(brw.Reader, func(op byte, p []byte) error {
			_, err := conn.Write(wsrelay.AppendFrame(nil, true, op, false, [4]byte{}, p))
			return err
		}, c.message)
	}))
	t.Cleanup(w.Server.Close)
	return w
}

// wsConversation is one socket's state: the responses produced on it
// (fakeprovider.Conversation: what a later previous_response_id on this
// socket continues).
type wsConversation struct {
	w      *wsAgentProvider
	socket int
	path   string
	header http.Header
	inner  http.Handler
	send   func([]byte) error
	conv   fakeprovider.Conversation
}

// wsCreateHead is what the provider reads of a client message.
type wsCreateHead struct {
	Type     string          `json:"type"`
	Model    string          `json:"model"`
	Prev     string          `json:"previous_response_id"`
	Generate *bool           `json:"generate"`
	Input    json.RawMessage `json:"input"`
}

func (c *wsConversation) message(msg []byte) error {
	var head wsCreateHead
	create := json.Unmarshal(msg, &head) == nil && head.Type == "response.create"
	w := c.w
	w.mu.Lock()
	w.msgs = append(w.msgs, wsMessage{Socket: c.socket, Body: msg, Create: create})
	w.mu.Unlock()
	if !create {
		return nil
	}
	whole, _, ok := c.conv.Resolve(msg)
	if !ok {
		w.mu.Lock()
		w.refused++
		w.mu.Unlock()
		return c.send(fakeprovider.PreviousResponseNotFound(head.Prev))
	}
	if head.Generate != nil && !*head.Generate {
		return c.warmUp(head.Model, whole)
	}
	body := fakeprovider.WholeBody(msg, whole)
	w.mu.Lock()
	w.billed = append(w.billed, body)
	w.mu.Unlock()
	if w.recover != nil {
		if id, ok := w.recover.call(body); ok {
			return c.callTool(head.Model, body, whole, id)
		}
	}
	return c.scripted(body, whole)
}

// keep records a response produced on this socket.
func (c *wsConversation) keep(id string, whole, output []json.RawMessage) {
	c.conv.Keep(id, whole, output...)
}

// warmUp answers a generate:false message with an empty completed
// response, which a later message may continue.
func (c *wsConversation) warmUp(model string, whole []json.RawMessage) error {
	id := fakeprovider.ResponseID("warm")
	c.keep(id, whole, nil)
	resp := fmt.Sprintf(`{"id":%q,"object":"response","created_at":1,"status":"%%s","model":%q,"output":[],"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}`, id, model)
	if err := c.send([]byte(`{"type":"response.created","sequence_number":0,"response":` + fmt.Sprintf(resp, "in_progress") + `}`)); err != nil {
		return err
	}
	return c.send([]byte(`{"type":"response.completed","sequence_number":1,"response":` + fmt.Sprintf(resp, "completed") + `}`))
}

// scripted answers body from the script (the HTTPS provider's answer,
// one message per event).
func (c *wsConversation) scripted(body []byte, whole []json.RawMessage) error {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, c.path, bytes.NewReader(body))
	req.Header = c.header.Clone()
	req.Header.Del("Upgrade")
	c.inner.ServeHTTP(rec, req)
	// The script names a response by its task and step, and a step
	// answered twice (a follow-up sent again) would repeat it: on the
	// socket each response gets an id of its own, as the API gives.
	var scriptID, id string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Type     string `json:"type"`
			Response struct {
				ID     string            `json:"id"`
				Output []json.RawMessage `json:"output"`
			} `json:"response"`
		}
		ok = json.Unmarshal([]byte(data), &ev) == nil
		if ok && scriptID == "" && ev.Response.ID != "" {
			scriptID, id = ev.Response.ID, fakeprovider.ResponseID(strings.TrimPrefix(ev.Response.ID, "resp_")+"_")
		}
		if scriptID != "" {
			data = strings.ReplaceAll(data, `"id":"`+scriptID+`"`, `"id":"`+id+`"`)
		}
		if ok && ev.Type == "response.completed" {
			c.keep(id, whole, ev.Response.Output)
		}
		if err := c.send([]byte(data)); err != nil {
			return err
		}
	}
	return nil
}

// callTool answers body with the model's call of the gateway's tool for
// artifact id (a reasoning item first, as a reasoning model answers),
// streamed, billed through the session's prompt cache.
func (c *wsConversation) callTool(model string, body []byte, whole []json.RawMessage, artifact string) error {
	p := c.w.p
	p.mu.Lock()
	u := p.bill(c.path, body)
	p.mu.Unlock()
	n := c.w.recover.made()
	id := fakeprovider.ResponseID("rcv")
	args, _ := json.Marshal(map[string]any{"action": "artifact_get", "artifact_id": artifact, "offset": 0, "limit": wsRecoverPage})
	reasoning := fmt.Sprintf(`{"type":"reasoning","id":"rs_rcv%d","summary":[],"encrypted_content":"gAAAAB-enc-rcv%d"}`, n, n)
	item := func(status, a string) string {
		return fmt.Sprintf(`{"type":"function_call","id":"fc_rcv%d","status":%q,"arguments":%s,"call_id":"tt_ws%d","name":%q}`, n, status, jsonString(a), n, recovery.ToolName)
	}
	resp := func(status, out, usage string) string {
		return fmt.Sprintf(`{"id":%q,"object":"response","created_at":1,"status":%q,"model":%q,"output":[%s],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":%s}`, id, status, model, out, usage)
	}
	usage := fmt.Sprintf(`{"input_tokens":%d,"output_tokens":20,"total_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens_details":{"reasoning_tokens":0}}`, u.input(), u.input()+20, u.read)
	half := len(args) / 2
	events := []string{
		fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, resp("in_progress", "", "null")),
		fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":%s}`, reasoning),
		fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":2,"output_index":0,"item":%s}`, reasoning),
		fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":3,"output_index":1,"item":%s}`, item("in_progress", "")),
		fmt.Sprintf(`{"type":"response.function_call_arguments.delta","sequence_number":4,"item_id":"fc_rcv%d","output_index":1,"delta":%s}`, n, jsonString(string(args[:half]))),
		fmt.Sprintf(`{"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"fc_rcv%d","output_index":1,"delta":%s}`, n, jsonString(string(args[half:]))),
		fmt.Sprintf(`{"type":"response.function_call_arguments.done","sequence_number":6,"item_id":"fc_rcv%d","output_index":1,"arguments":%s}`, n, jsonString(string(args))),
		fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":7,"output_index":1,"item":%s}`, item("completed", string(args))),
		fmt.Sprintf(`{"type":"response.completed","sequence_number":8,"response":%s}`, resp("completed", reasoning+","+item("completed", string(args)), usage)),
	}
	c.keep(id, whole, []json.RawMessage{json.RawMessage(reasoning), json.RawMessage(item("completed", string(args)))})
	for _, ev := range events {
		if err := c.send([]byte(ev)); err != nil {
			return err
		}
	}
	return nil
}

// wsRecoverPage is the characters of the artifact the model asks for: a
// page of what it needs, as a model quoting a few lines would.
const wsRecoverPage = 2000

func joinItems(items []json.RawMessage) json.RawMessage {
	return json.RawMessage("[" + string(bytes.Join(func() [][]byte {
		out := make([][]byte, len(items))
		for i, it := range items {
			out[i] = it
		}
		return out
	}(), []byte(","))) + "]")
}

// marshalNoEscape encodes v as the clients do: no HTML escaping.
func marshalNoEscape(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return nil
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// messages returns the text messages received, in order.
func (w *wsAgentProvider) messages() []wsMessage {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wsMessage(nil), w.msgs...)
}

// counts returns the sockets opened and the creates answered
// previous_response_not_found.
func (w *wsAgentProvider) counts() (sockets, refused int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sockets, w.refused
}

// wholeBodies returns the whole Responses body of every answered create.
func (w *wsAgentProvider) wholeBodies() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]byte(nil), w.billed...)
}

// wsRecovering is a model that recovers receipts with the gateway's tool:
// a create that offers the tool and carries a receipt it has not read yet
// (at most max receipts in the session) is answered with a call of the
// tool for that receipt; the gateway's follow-up (the call's output in the
// history, whether continued by previous_response_id or sent whole) is
// answered from the script, as if the call had not been made
// (ownToolHidden).
type wsRecovering struct {
	max   int
	mu    sync.Mutex
	read  []string // the receipts' artifact ids, in the order called
	calls int
}

// call returns the artifact the model calls the tool for; false when it
// answers from the script.
func (m *wsRecovering) call(body []byte) (string, bool) {
	if !offersTool(body, recovery.ToolName) || endsWithOwnOutput(body) {
		return "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.read) >= m.max {
		return "", false
	}
	for _, sub := range receiptIDRE.FindAllSubmatch(body, -1) {
		id := string(sub[1])
		if !containsString(m.read, id) {
			m.read = append(m.read, id)
			return id, true
		}
	}
	return "", false
}

// made counts a tool call and returns its number.
func (m *wsRecovering) made() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	return m.calls
}

// recovered returns the artifact ids the model called the tool for.
func (m *wsRecovering) recovered() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.read...)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// offersTool reports whether a Responses body defines the function tool name.
func offersTool(body []byte, name string) bool {
	var req struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	for _, t := range req.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// responsesItem is what the scripted model reads of an input item.
type responsesItem struct {
	Type   string `json:"type"`
	Name   string `json:"name"`
	CallID string `json:"call_id"`
	Output any    `json:"output"`
}

// ownToolOutputs returns the outputs of the gateway's tool calls in a
// Responses body's input (the calls found by name, their outputs by
// call_id), in order.
func ownToolOutputs(body []byte) []string {
	items, own := ownToolItems(body)
	var out []string
	for i, it := range items {
		if own[i] && it.Type == "function_call_output" {
			s, _ := it.Output.(string)
			out = append(out, s)
		}
	}
	return out
}

// ownToolItems parses a body's input and marks the gateway's tool calls
// and their outputs.
func ownToolItems(body []byte) ([]responsesItem, []bool) {
	var req struct {
		Input []responsesItem `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	calls := map[string]bool{}
	own := make([]bool, len(req.Input))
	for i, it := range req.Input {
		switch {
		case it.Type == "function_call" && it.Name == recovery.ToolName:
			calls[it.CallID], own[i] = true, true
		case it.Type == "function_call_output" && calls[it.CallID]:
			own[i] = true
		}
	}
	return req.Input, own
}

// endsWithOwnOutput reports whether the body's last input item is an
// output of the gateway's tool: a follow-up.
func endsWithOwnOutput(body []byte) bool {
	items, own := ownToolItems(body)
	return len(items) > 0 && own[len(items)-1] && items[len(items)-1].Type == "function_call_output"
}

// ownToolHidden is a dialect that answers a request as the inner dialect
// answers it without the gateway's tool calls and their outputs: the
// scripted model continues where it was before it called the tool.
type ownToolHidden struct{ agentDialect }

func (d ownToolHidden) next(body []byte) (int, int, bool) {
	return d.agentDialect.next(withoutOwnTool(body))
}

func (d ownToolHidden) reply(w http.ResponseWriter, body []byte, task, step int, calls []agentAction, final string, u cacheUsage) {
	d.agentDialect.reply(w, withoutOwnTool(body), task, step, calls, final, u)
}

// withoutOwnTool returns body with the gateway's tool calls and their
// outputs (and the reasoning item right before a call) left out of input.
func withoutOwnTool(body []byte) []byte {
	var m map[string]json.RawMessage
	var raw []json.RawMessage
	if json.Unmarshal(body, &m) != nil || json.Unmarshal(m["input"], &raw) != nil {
		return body
	}
	items, own := ownToolItems(body)
	if len(items) != len(raw) {
		return body
	}
	var kept []json.RawMessage
	for i := range raw {
		if own[i] || items[i].Type == "reasoning" && i+1 < len(raw) && own[i+1] {
			continue
		}
		kept = append(kept, raw[i])
	}
	if len(kept) == len(raw) {
		return body
	}
	m["input"] = joinItems(kept)
	return marshalNoEscape(m)
}

// readUntilEnd reads server messages up to the end of a response
// (response.completed) or an error event, and returns them.
func (c *wsClient) readUntilEnd() [][]byte {
	c.t.Helper()
	var out [][]byte
	for {
		op, p := c.next()
		if op != wsrelay.OpText {
			continue
		}
		out = append(out, p)
		var ev struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(p, &ev) != nil {
			c.t.Fatalf("server message is not JSON: %.80q", p)
		}
		if ev.Type == "response.completed" || ev.Type == "error" {
			return out
		}
	}
}

// wsCompleted is what a test reads of a response's last event.
type wsCompleted struct {
	Type     string `json:"type"`
	Response struct {
		ID     string `json:"id"`
		Output []struct {
			Type      string `json:"type"`
			Name      string `json:"name"`
			CallID    string `json:"call_id"`
			Arguments string `json:"arguments"`
		} `json:"output"`
		Usage struct {
			Input   int `json:"input_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	} `json:"response"`
	Error struct {
		Code  string `json:"code"`
		Param string `json:"param"`
	} `json:"error"`
}

// The scripted provider's socket, driven by hand: a create offering the
// gateway's tool with a receipt is answered by a streamed call of the
// tool for that receipt; the follow-up, chained by previous_response_id
// or sent whole, continues the script; usage is the whole history's,
// with the prefix the socket's earlier request shares read from the
// cache; previous_response_id resolves only on the socket that produced
// the response.
func TestWSAgentProviderRecovers(t *testing.T) {
	tasks := []agentTask{{taskTag(1) + " Read a.txt.", [][]agentAction{{{kind: actRead, file: "a.txt"}}}}}
	prov := newAgentProvider(t, tasks, ownToolHidden{codexDialect{}})
	m := &wsRecovering{max: 1}
	w := newWSAgentProvider(t, prov, m)
	receipt := "a_0123456789abcdef0123456789abcdef"
	person := fmt.Sprintf(`{"type":"message","role":"user","content":[{"type":"input_text","text":%s}]}`,
		jsonString(taskTag(1)+" Read a.txt. "+strings.Repeat("context ", 1200)+"[Token Terminator artifact "+receipt+" 9000 chars]"))
	tools := `"tools":[{"type":"function","name":"exec_command","parameters":{}},{"type":"function","name":"token_terminator","parameters":{}}]`
	create := func(prev string, items ...string) []byte {
		p := ""
		if prev != "" {
			p = fmt.Sprintf(`"previous_response_id":%q,`, prev)
		}
		return []byte(fmt.Sprintf(`{"type":"response.create","model":"gpt-5",%s%s,"input":[%s]}`, p, tools, strings.Join(items, ",")))
	}
	last := func(c *wsClient, msg []byte) wsCompleted {
		t.Helper()
		c.send(maskedFrame(true, wsrelay.OpText, msg))
		evs := c.readUntilEnd()
		var ev wsCompleted
		if err := json.Unmarshal(evs[len(evs)-1], &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	output := `{"type":"function_call_output","call_id":"tt_ws1","output":"{\"artifact_id\":\"` + receipt + `\",\"content\":\"line\"}"}`

	c1 := dialWS(t, w.URL, "/v1/responses", "sk-ws-provider")
	first := last(c1, create("", person))
	calls := first.Response.Output
	if first.Type != "response.completed" || len(calls) != 2 || calls[1].Name != recovery.ToolName || calls[1].CallID != "tt_ws1" || !strings.Contains(calls[1].Arguments, receipt) {
		t.Fatalf("first answer: %+v, want a call of the gateway's tool for %s", first, receipt)
	}
	chained := last(c1, create(first.Response.ID, output))
	if !strings.HasPrefix(chained.Response.ID, "resp_t1s0_") || chained.Response.Output[1].Name != "exec_command" {
		t.Fatalf("the chained follow-up was answered %+v, want the script's t1s0", chained)
	}
	t.Logf("usage: first %+v, chained %+v", first.Response.Usage, chained.Response.Usage)
	if u := chained.Response.Usage; u.Input <= first.Response.Usage.Input || u.Details.Cached == 0 {
		t.Fatalf("chained usage %+v after %+v: want the whole history billed, its prefix read from the cache", u, first.Response.Usage)
	}
	if ev := last(c1, create("resp_unknown", output)); ev.Type != "error" || ev.Error.Code != "previous_response_not_found" || ev.Error.Param != "previous_response_id" {
		t.Fatalf("an unknown previous_response_id was answered %+v", ev)
	}
	c2 := dialWS(t, w.URL, "/v1/responses", "sk-ws-provider")
	if ev := last(c2, create(chained.Response.ID, `{"type":"function_call_output","call_id":"call_t1s0c0","output":"x"}`)); ev.Type != "error" {
		t.Fatalf("a response of another socket was continued: %+v", ev)
	}
	// The follow-up sent whole (the original input, the round's output
	// items and the tool's output) continues the script too, and the
	// receipt, read once, is not asked for again.
	reasoning := `{"type":"reasoning","id":"rs_rcv1","summary":[],"encrypted_content":"gAAAAB-enc-rcv1"}`
	call := `{"type":"function_call","id":"fc_rcv1","status":"completed","arguments":"{}","call_id":"tt_ws1","name":"token_terminator"}`
	if ev := last(c2, create("", person, reasoning, call, output)); !strings.HasPrefix(ev.Response.ID, "resp_t1s0_") || ev.Response.ID == chained.Response.ID {
		t.Fatalf("the whole follow-up was answered %+v, want the script's t1s0", ev)
	}
	if ev := last(c1, create(chained.Response.ID, `{"type":"function_call_output","call_id":"call_t1s0c0","output":"x"}`)); !strings.HasPrefix(ev.Response.ID, "resp_t1s1_") {
		t.Fatalf("the client's next step was answered %+v, want the script's t1s1", ev)
	}
	if got := strings.Join(prov.script(), ","); got != "t1s0,t1s0,t1s1" {
		t.Fatalf("script %s", got)
	}
	if read := m.recovered(); len(read) != 1 || read[0] != receipt {
		t.Fatalf("the model read %v", read)
	}
	for i, b := range w.wholeBodies() {
		if err := compiler.CheckRules("/v1/responses", b); err != nil {
			t.Fatalf("whole body %d breaks the Responses rules: %v", i, err)
		}
	}
	if sockets, refused := w.counts(); sockets != 2 || refused != 2 {
		t.Fatalf("%d sockets, %d refused", sockets, refused)
	}
}
