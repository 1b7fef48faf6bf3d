package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// wsRecoveryUpstream is a scripted provider of the Responses WebSocket for
// the recovery loop: a response.create that carries a receipt and the
// gateway's tool is answered, streamed, by a call of token_terminator
// for that receipt; the follow-up that answers it gets a text answer (or,
// with failFollowUp, an error event). Every other message gets a text
// answer. It records each create with the socket it came on.
type wsRecoveryUpstream struct {
	failFollowUp bool

	mu      sync.Mutex
	sockets int
	creates []wsCreate
	usage   map[string][3]int // response id -> input, cached, output tokens
}

type wsCreate struct {
	socket int
	msg    []byte
	id     string // the response id it was answered with
}

const wsCallPrefix = "call_ttws_"

func (u *wsRecoveryUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !fakeprovider.IsWebSocket(r) {
		http.Error(w, "websocket only", http.StatusBadRequest)
		return
	}
	conn, brw, ok := fakeprovider.Upgrade(w, r.Header.Get("Sec-WebSocket-Key"))
	if !ok {
		return
	}
	defer conn.Close()
	u.mu.Lock()
	u.sockets++
	socket := u.sockets
	u.mu.Unlock()
	send := func(op byte, p []byte) error {
		_, err := conn.Write(wsrelay.AppendFrame(nil, true, op, false, [4]byte{}, p))
		return err
	}
	fakeprovider.ServeFrames(brw.Reader, send, func(msg []byte) error {
		for _, ev := range u.answer(socket, msg) {
			if err := send(wsrelay.OpText, []byte(ev)); err != nil {
				return err
			}
		}
		return nil
	})
}

// answer records a message and returns the events of its answer.
func (u *wsRecoveryUpstream) answer(socket int, msg []byte) []string {
	var req struct {
		Type  string          `json:"type"`
		Tools json.RawMessage `json:"tools"`
		Input []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		} `json:"input"`
	}
	if json.Unmarshal(msg, &req) != nil || req.Type != "response.create" {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n := len(u.creates)
	id := fmt.Sprintf("resp_ttws%d", n)
	u.creates = append(u.creates, wsCreate{socket: socket, msg: bytes.Clone(msg), id: id})
	if u.usage == nil {
		u.usage = map[string][3]int{}
	}
	tools := req.Tools
	if len(tools) == 0 {
		tools = json.RawMessage("[]")
	}
	usage := [3]int{1000 + n, 100 * n, 10 + n}
	u.usage[id] = usage
	followUp := len(req.Input) > 0 && req.Input[0].Type == "function_call_output" && strings.HasPrefix(req.Input[0].CallID, wsCallPrefix)
	switch m := receiptIDRE.FindSubmatch(msg); {
	case followUp && u.failFollowUp:
		return []string{`{"type":"error","sequence_number":0,"error":{"type":"invalid_request_error","code":"server_error","message":"scripted failure"}}`}
	case followUp:
		return wsTextEvents(id, tools, "recovered: the page arrived", usage)
	case m != nil && bytes.Contains(msg, []byte(`"name":"`+recovery.ToolName+`"`)):
		return wsCallEvents(id, tools, string(m[1]), wsCallPrefix+fmt.Sprint(n), usage)
	}
	return wsTextEvents(id, tools, "plain answer", usage)
}

func wsUsage(u [3]int) string {
	return fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`,
		u[0], u[1], u[2], u[0]+u[2])
}

func wsResp(id string, tools json.RawMessage, status, output, usage string) string {
	return fmt.Sprintf(`{"id":%q,"object":"response","created_at":1,"status":%q,"model":"gpt-5","output":[%s],"tools":%s,"usage":%s}`, id, status, output, tools, usage)
}

func wsTextEvents(id string, tools json.RawMessage, text string, u [3]int) []string {
	item := fmt.Sprintf(`{"type":"message","id":"msg_%s","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, id, text)
	return []string{
		fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, wsResp(id, tools, "in_progress", "", "null")),
		fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":%s}`, item),
		fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_%s","output_index":0,"content_index":0,"delta":%q}`, id, text),
		fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":%s}`, item),
		fmt.Sprintf(`{"type":"response.completed","sequence_number":4,"response":%s}`, wsResp(id, tools, "completed", item, wsUsage(u))),
	}
}

func wsCallEvents(id string, tools json.RawMessage, artifactID, callID string, u [3]int) []string {
	args := fmt.Sprintf(`{"action":"artifact_get","artifact_id":%q}`, artifactID)
	item := func(status, a string) string {
		return fmt.Sprintf(`{"type":"function_call","id":"fc_%s","call_id":%q,"name":%q,"arguments":%q,"status":%q}`, id, callID, recovery.ToolName, a, status)
	}
	return []string{
		fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, wsResp(id, tools, "in_progress", "", "null")),
		fmt.Sprintf(`{"type":"response.in_progress","sequence_number":1,"response":%s}`, wsResp(id, tools, "in_progress", "", "null")),
		fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":%s}`, item("in_progress", "")),
		fmt.Sprintf(`{"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_%s","output_index":0,"delta":%q}`, id, args),
		fmt.Sprintf(`{"type":"response.function_call_arguments.done","sequence_number":4,"item_id":"fc_%s","output_index":0,"arguments":%q}`, id, args),
		fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":5,"output_index":0,"item":%s}`, item("completed", args)),
		fmt.Sprintf(`{"type":"response.completed","sequence_number":6,"response":%s}`, wsResp(id, tools, "completed", item("completed", args), wsUsage(u))),
	}
}

func (u *wsRecoveryUpstream) snapshot() ([]wsCreate, map[string][3]int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := make(map[string][3]int, len(u.usage))
	for k, v := range u.usage {
		m[k] = v
	}
	return append([]wsCreate(nil), u.creates...), m
}

// wsEvent is what the test reads of a message the client got.
type wsEvent struct {
	Type     string `json:"type"`
	Seq      *int   `json:"sequence_number"`
	Delta    string `json:"delta"`
	Response struct {
		ID    string          `json:"id"`
		Tools json.RawMessage `json:"tools"`
		Usage struct {
			Input   int `json:"input_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
			Output int `json:"output_tokens"`
		} `json:"usage"`
	} `json:"response"`
}

// untilEnd reads the client's messages of one response up to its end.
func (c *wsClient) untilEnd() (raw [][]byte, evs []wsEvent) {
	c.t.Helper()
	for {
		op, p := c.next()
		if op != wsrelay.OpText {
			continue
		}
		var ev wsEvent
		if err := json.Unmarshal(p, &ev); err != nil {
			c.t.Fatalf("client got a message that is not JSON: %.120q", p)
		}
		raw, evs = append(raw, p), append(evs, ev)
		switch ev.Type {
		case "response.completed", "response.failed", "response.incomplete", "error":
			return raw, evs
		}
	}
}

// wsRecoverySession runs the scripted Codex session over one socket per
// four messages against the gateway and returns, per step, what the
// client got.
func wsRecoverySession(t *testing.T, base string, steps []fixtures.CorpusRequest) [][][]byte {
	var c *wsClient
	var got [][][]byte
	for i, s := range steps {
		if i%4 == 0 {
			c = dialWS(t, base, "/v1/responses", "sk-ws-recovery")
		}
		msg := createMessage(s.Body)
		if i%4 == 1 { // a ping before the message, answered in order
			c.send(maskedFrame(true, wsrelay.OpPing, []byte("p")))
			if op, p := c.next(); op != wsrelay.OpPong || string(p) != "p" {
				t.Fatalf("step %d: ping answered %d %q", i, op, p)
			}
		}
		c.send(maskedFrame(true, wsrelay.OpText, msg))
		raw, _ := c.untilEnd()
		got = append(got, raw)
	}
	return got
}

// findString reports whether a JSON value holds a string for which ok
// holds.
func findString(v any, ok func(string) bool) bool {
	switch x := v.(type) {
	case string:
		return ok(x)
	case []any:
		for _, e := range x {
			if findString(e, ok) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if findString(e, ok) {
				return true
			}
		}
	}
	return false
}

// The recovery tool's loop over the Responses WebSocket, through real
// Caddy: a message that carries a receipt and the tool goes out compiled;
// the model's call of token_terminator is answered from the vault with
// the exact content, and the follow-up goes out on the same upstream
// socket, chained to the round's response; the client sees one response,
// streamed, with no trace of the tool, sequence numbers without gaps and
// the usage of both rounds summed.
func TestWebSocketRecoveryLoop(t *testing.T) {
	steps := fixtures.Session(fixtures.SessionOptions{Format: "openai_responses", Steps: 8, PersonTurns: 2,
		OutputChars: 9000, ReReadEvery: 3, Seed: 5, Client: "codex"})
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "recovered", true: "follow-up refused"}[fail], func(t *testing.T) {
			up := &wsRecoveryUpstream{failFollowUp: fail}
			srv := httptest.NewServer(up)
			defer srv.Close()
			g := startGateway(t, defaultSnippet, &upstream{Server: srv})
			got := wsRecoverySession(t, g.URL, steps)
			creates, usage := up.snapshot()
			loops := 0
			for k := 0; k+1 < len(creates); k++ {
				call, fu := creates[k], creates[k+1]
				if !isFollowUp(fu.msg) {
					continue
				}
				loops++
				step := k - loops + 1 // the client's step whose message opened the loop
				checkFollowUp(t, call, fu, steps[step].Body)
				checkClientSaw(t, got[step], call, fu, usage, fail)
			}
			t.Logf("%d loops over %d steps", loops, len(steps))
			if loops == 0 {
				t.Fatal("no message went out with a receipt and the tool: the loop never ran")
			}
			if len(creates) != len(steps)+loops {
				t.Fatalf("upstream got %d creates for %d steps and %d follow-ups", len(creates), len(steps), loops)
			}
			for i, raw := range got {
				for _, p := range raw {
					if bytes.Contains(p, []byte(recovery.ToolName)) || bytes.Contains(p, []byte(wsCallPrefix)) {
						t.Fatalf("step %d: the client saw the tool or its call: %.200s", i, p)
					}
				}
			}
			want := "websocket recovery"
			if !logHas(g, want) {
				t.Fatalf("no %q log line", want)
			}
		})
	}
}

func isFollowUp(msg []byte) bool {
	return bytes.Contains(msg, []byte(`"type":"function_call_output","call_id":"`+wsCallPrefix))
}

// checkFollowUp: the follow-up came on the same socket, chained to the
// round's response, carrying the exact vaulted content.
func checkFollowUp(t *testing.T, call, fu wsCreate, original []byte) {
	t.Helper()
	if fu.socket != call.socket {
		t.Fatalf("the follow-up came on socket %d, the message on %d", fu.socket, call.socket)
	}
	var req struct {
		Prev  string `json:"previous_response_id"`
		Input []struct {
			Output string `json:"output"`
		} `json:"input"`
	}
	if err := json.Unmarshal(fu.msg, &req); err != nil || req.Prev != call.id || len(req.Input) != 1 {
		t.Fatalf("follow-up %.300s: not chained to %s with one output (%v)", fu.msg, call.id, err)
	}
	var page recovery.Page
	if err := json.Unmarshal([]byte(req.Input[0].Output), &page); err != nil || page.Content == "" {
		t.Fatalf("the follow-up's output is no page: %.200s", req.Input[0].Output)
	}
	// The page is the start of what the client sent, and the digest the
	// page names is that of the client's text from there: the artifact
	// came back exactly.
	var orig any
	exact := func(s string) bool {
		i := strings.Index(s, page.Content)
		if i < 0 {
			return false
		}
		r := []rune(s[i:])
		if len(r) < page.TotalChars {
			return false
		}
		sum := sha256.Sum256([]byte(string(r[:page.TotalChars])))
		return hex.EncodeToString(sum[:]) == page.SHA256
	}
	if err := json.Unmarshal(original, &orig); err != nil || page.Offset != 0 || !findString(orig, exact) {
		t.Fatalf("the recovered content (%d chars from %d) is not exactly what the client sent", page.TotalChars, page.Offset)
	}
}

// checkClientSaw: one response, sequence numbers without gaps, the
// usage summed (or, refused, the first round's usage, well formed).
func checkClientSaw(t *testing.T, raw [][]byte, call, fu wsCreate, usage map[string][3]int, fail bool) {
	t.Helper()
	var evs []wsEvent
	for _, p := range raw {
		var ev wsEvent
		json.Unmarshal(p, &ev)
		evs = append(evs, ev)
	}
	created := 0
	for i, ev := range evs {
		if ev.Seq == nil || *ev.Seq != i {
			t.Fatalf("message %d (%s) has sequence_number %v, want %d", i, ev.Type, ev.Seq, i)
		}
		if ev.Type == "response.created" {
			created++
		}
		if ev.Type == "error" {
			t.Fatal("the client saw the refused follow-up's error")
		}
	}
	last := evs[len(evs)-1]
	if created != 1 || last.Type != "response.completed" {
		t.Fatalf("the client saw %d response.created and ended with %s", created, last.Type)
	}
	want, id := usage[call.id], call.id
	if !fail {
		f := usage[fu.id]
		want, id = [3]int{want[0] + f[0], want[1] + f[1], want[2] + f[2]}, fu.id
		if !bytes.Contains(bytes.Join(raw, nil), []byte("recovered: the page arrived")) {
			t.Fatal("the client did not get the final round's text")
		}
	}
	u := last.Response.Usage
	if last.Response.ID != id || u.Input != want[0] || u.Details.Cached != want[1] || u.Output != want[2] {
		t.Fatalf("final response %s usage %+v, want %s with %v", last.Response.ID, u, id, want)
	}
}
