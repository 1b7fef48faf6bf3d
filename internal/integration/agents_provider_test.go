package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/caddymodule"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
)

// This file holds the scripted fake provider the agent CLI test drives the
// real Claude Code and Codex CLIs against, and the recording tap that sits
// between a CLI and Caddy to keep the bodies exactly as the client sent them.

// actionKind is one thing the scripted model asks the agent to do.
type actionKind int

const (
	actRead  actionKind = iota // read a whole file
	actShell                   // run a shell command
	actEdit                    // replace one line of a file
)

// agentAction is one tool call of a scripted step.
type agentAction struct {
	kind     actionKind
	file     string // actRead, actEdit: a file of the work directory
	cmd      string // actShell
	old, new string // actEdit: the exact line and its replacement
}

// agentTask is one message of the person and what the model does about it:
// each step is one model reply holding its tool calls (several are parallel
// calls); after the last step the model answers with text.
type agentTask struct {
	prompt string
	steps  [][]agentAction
}

// taskTag marks the person's message of task n; the provider finds the task
// by it, so that side requests of a client never match a task.
func taskTag(n int) string { return fmt.Sprintf("TT-TASK-%d", n) }

var taskTagRE = regexp.MustCompile(`TT-TASK-(\d+)`)

// callIDRE finds the task and step a tool call id was made for: the ids
// are minted by the provider, so every request says where the script is
// from its last message alone, whatever the gateway did to older turns.
var callIDRE = regexp.MustCompile(`t(\d+)s(\d+)c\d+`)

// agentDialect renders the script in one client's tools and wire format.
type agentDialect interface {
	// next finds where the script is from a request body: the task and the
	// step to answer with; ok is false for a request that is not part of
	// the scripted conversation (a client's side request).
	next(body []byte) (task, step int, ok bool)
	// reply writes the model's answer: step's tool calls, or the task's
	// final text when step is past the last.
	// u is what the provider's prompt cache did with the request.
	reply(w http.ResponseWriter, body []byte, task, step int, calls []agentAction, final string, u cacheUsage)
	// sideReply answers a request outside the script.
	sideReply(w http.ResponseWriter, r *http.Request, body []byte)
}

// agentProvider is the scripted fake provider. It answers deterministically
// from each request (never from the order of requests) and records every
// request it got with the step it answered.
type agentProvider struct {
	*upstream
	answers []string        // guarded by upstream.mu; answers[i] is what reqs[i] got: "t1s0", or sideRequest
	cache   *cost.Simulator // guarded by upstream.mu; the session's prompt cache, as the provider keeps it
}

// cacheUsage is the provider's account of one request's input tokens: read
// from its prompt cache, written to it, and neither. The fake provider
// reports what a real one would (a simulated prefix cache, cost.Simulator),
// so the gateway's cost decisions are calibrated as in production: a fake
// that always reported no cache read would tell the gateway every cache
// is cold.
type cacheUsage struct{ read, written, plain int }

func (u cacheUsage) input() int { return u.read + u.written + u.plain }

// sideRequest is the answer recorded for a request outside the script.
const sideRequest = "side"

func newAgentProvider(t *testing.T, tasks []agentTask, d agentDialect) *agentProvider {
	t.Helper()
	u := &upstream{}
	p := &agentProvider{upstream: u}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerVerification(w, r) {
			return
		}
		body, err := io.ReadAll(r.Body)
		answer := sideRequest
		task, step, ok := d.next(body)
		if err == nil && r.Method == http.MethodPost && isCandidate(r.URL.Path) && ok && task >= 1 && task <= len(tasks) && step <= len(tasks[task-1].steps) {
			answer = fmt.Sprintf("t%ds%d", task, step)
		}
		// The request and its answer are recorded together, so that they
		// stay paired when a client sends requests concurrently.
		u.mu.Lock()
		u.reqs = append(u.reqs, received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, ContentLength: r.ContentLength})
		p.answers = append(p.answers, answer)
		var usage cacheUsage
		if answer != sideRequest {
			usage = p.bill(r.URL.Path, body)
		}
		u.mu.Unlock()
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
		case answer == sideRequest:
			d.sideReply(w, r, body)
		default:
			var calls []agentAction
			if steps := tasks[task-1].steps; step < len(steps) {
				calls = steps[step]
			}
			d.reply(w, body, task, step, calls, fmt.Sprintf("Task %d finished after %d tool steps.", task, step), usage)
		}
	}))
	t.Cleanup(u.Close)
	return p
}

// bill runs a scripted request through the session's simulated prompt
// cache. Called with upstream.mu held.
func (p *agentProvider) bill(path string, body []byte) cacheUsage {
	format, _ := compiler.FormatFor(http.MethodPost, path)
	var req struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &req)
	if p.cache == nil {
		p.cache = &cost.Simulator{Model: cost.Config{}.Model(format, req.Model)}
	}
	b := p.cache.Step(cost.Render(format, body), time.Now())
	return cacheUsage{read: int(b.Read), written: int(b.Written), plain: int(b.Plain)}
}

// script returns the scripted steps answered, in order (side requests left
// out): what the client did, as seen by the provider.
func (p *agentProvider) script() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, a := range p.answers {
		if a != sideRequest {
			out = append(out, a)
		}
	}
	return out
}

// forwarded is one request the provider got, with the step it answered.
type forwarded struct {
	received
	Answer string
}

// bySeq returns the requests the provider got, keyed by the tap's number.
func (p *agentProvider) bySeq() map[int]forwarded {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int]forwarded, len(p.reqs))
	for i, r := range p.reqs {
		seq, err := strconv.Atoi(r.Header.Get(seqHeader))
		if err == nil {
			out[seq] = forwarded{r, p.answers[i]}
		}
	}
	return out
}

// seqHeader carries the tap's number of a request through Caddy to the
// provider, so forwarded bodies pair with the originals even when a client
// sends requests concurrently.
const seqHeader = "X-Tt-Test-Seq"

// tapped is one request as the client sent it, with what it got back.
type tapped struct {
	Seq    int
	Method string
	Path   string
	Header http.Header
	Body   []byte
	Status int
	TT     string // the Token-Terminator response header
}

// tap is a transparent recording reverse proxy in front of Caddy: it keeps
// each body exactly as the client sent it (the checker's "original") and
// numbers the requests.
type tap struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*tapped
}

func newTap(t *testing.T, target string) *tap {
	t.Helper()
	tu, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{}
	rp := httputil.NewSingleHostReverseProxy(tu)
	rp.FlushInterval = -1 // SSE goes through as it comes
	rp.ModifyResponse = func(resp *http.Response) error {
		seq, _ := strconv.Atoi(resp.Request.Header.Get(seqHeader))
		tp.mu.Lock()
		defer tp.mu.Unlock()
		for _, r := range tp.reqs {
			if r.Seq == seq {
				r.Status, r.TT = resp.StatusCode, resp.Header.Get(caddymodule.HeaderName)
			}
		}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		t.Errorf("tap: %s %s: %v", r.Method, r.URL.Path, err)
		w.WriteHeader(http.StatusBadGateway)
	}
	tp.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tp.mu.Lock()
		rec := &tapped{Seq: len(tp.reqs) + 1, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
		tp.reqs = append(tp.reqs, rec)
		tp.mu.Unlock()
		r.Header.Set(seqHeader, strconv.Itoa(rec.Seq))
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(tp.Close)
	return tp
}

func (tp *tap) all() []tapped {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := make([]tapped, len(tp.reqs))
	for i, r := range tp.reqs {
		out[i] = *r
	}
	return out
}

// --- Claude Code: Anthropic Messages, SSE ---

// claudeDialect speaks Anthropic Messages with Claude Code's tools (Read,
// Bash, Edit take absolute paths, so it knows the work directory).
type claudeDialect struct{ workdir string }

type anthropicMsg struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	ToolUseID string `json:"tool_use_id"`
}

func (claudeDialect) next(body []byte) (int, int, bool) {
	var req struct {
		Messages []anthropicMsg    `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Tools) == 0 || len(req.Messages) == 0 {
		return 0, 0, false
	}
	// Claude Code sends its environment as a role "system" message after
	// the first user message; the conversation's last word is before it.
	msgs := req.Messages
	for len(msgs) > 1 && msgs[len(msgs)-1].Role == "system" {
		msgs = msgs[:len(msgs)-1]
	}
	last := msgs[len(msgs)-1]
	if last.Role != "user" {
		return 0, 0, false
	}
	var blocks []anthropicBlock
	if json.Unmarshal(last.Content, &blocks) != nil {
		var s string
		if json.Unmarshal(last.Content, &s) != nil {
			return 0, 0, false
		}
		blocks = []anthropicBlock{{Type: "text", Text: s}}
	}
	var text strings.Builder
	for _, b := range blocks {
		if b.Type == "tool_result" {
			if m := callIDRE.FindStringSubmatch(b.ToolUseID); m != nil {
				task, _ := strconv.Atoi(m[1])
				step, _ := strconv.Atoi(m[2])
				return task, step + 1, true
			}
		}
		text.WriteString(b.Text)
	}
	return taskOf(text.String())
}

// taskOf finds the last task tag in the person's text: step 0 of it.
func taskOf(text string) (int, int, bool) {
	ms := taskTagRE.FindAllStringSubmatch(text, -1)
	if len(ms) == 0 {
		return 0, 0, false
	}
	n, _ := strconv.Atoi(ms[len(ms)-1][1])
	return n, 0, true
}

func (d claudeDialect) reply(w http.ResponseWriter, body []byte, task, step int, calls []agentAction, final string, u cacheUsage) {
	var req struct {
		Model    string `json:"model"`
		Thinking *struct {
			Type string `json:"type"`
		} `json:"thinking"`
	}
	_ = json.Unmarshal(body, &req)
	var ev [][2]string
	ev = append(ev, [2]string{"message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_t%ds%d","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d,"output_tokens":1}}}`, task, step, req.Model, u.plain, u.read, u.written)})
	idx := 0
	add := func(start string, deltas ...string) {
		ev = append(ev, [2]string{"content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, idx, start)})
		for _, dl := range deltas {
			ev = append(ev, [2]string{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, idx, dl)})
		}
		ev = append(ev, [2]string{"content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, idx)})
		idx++
	}
	if req.Thinking != nil && req.Thinking.Type != "disabled" {
		// A signed thinking block, as the real API sends with thinking on:
		// the client sends it back and the gateway must keep it.
		add(`{"type":"thinking","thinking":"","signature":""}`,
			fmt.Sprintf(`{"type":"thinking_delta","thinking":"Planning step %d of task %d."}`, step, task),
			fmt.Sprintf(`{"type":"signature_delta","signature":"c2lnLXQlZHMlZA-t%ds%d"}`, task, step))
	}
	stop := "end_turn"
	if len(calls) == 0 {
		add(`{"type":"text","text":""}`, fmt.Sprintf(`{"type":"text_delta","text":%q}`, final))
	} else {
		stop = "tool_use"
		for i, c := range calls {
			name, input := d.tool(c)
			add(fmt.Sprintf(`{"type":"tool_use","id":"toolu_t%ds%dc%d","name":%q,"input":{}}`, task, step, i, name),
				fmt.Sprintf(`{"type":"input_json_delta","partial_json":%s}`, jsonString(input)))
		}
	}
	ev = append(ev,
		[2]string{"message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":20}}`, stop)},
		[2]string{"message_stop", `{"type":"message_stop"}`})
	sse(w, ev...)
}

// tool renders an action as Claude Code's tool and its JSON input.
func (d claudeDialect) tool(a agentAction) (string, string) {
	m := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	switch a.kind {
	case actRead:
		return "Read", m(map[string]string{"file_path": d.workdir + "/" + a.file})
	case actEdit:
		return "Edit", m(map[string]string{"file_path": d.workdir + "/" + a.file, "old_string": a.old, "new_string": a.new})
	default:
		return "Bash", m(map[string]string{"command": a.cmd, "description": "Run a command"})
	}
}

func (claudeDialect) sideReply(w http.ResponseWriter, r *http.Request, body []byte) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/count_tokens"):
		jsonReply(w, `{"input_tokens":1000}`)
	case strings.HasSuffix(r.URL.Path, "/messages"):
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.Unmarshal(body, &req)
		messagesReply(w, req.Model, "ok", req.Stream)
	default:
		http.NotFound(w, r)
	}
}

// --- Codex: OpenAI Responses, SSE ---

// codexDialect speaks OpenAI Responses with Codex's exec_command tool: a
// read is cat, an edit is sed, both run in the session's directory.
type codexDialect struct{}

func (codexDialect) next(body []byte) (int, int, bool) {
	var req struct {
		Input []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			CallID  string          `json:"call_id"`
			Content json.RawMessage `json:"content"` // a list of parts, or a string (a folded turn)
		} `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Input) == 0 {
		return 0, 0, false
	}
	last := req.Input[len(req.Input)-1]
	if last.Type == "function_call_output" {
		if m := callIDRE.FindStringSubmatch(last.CallID); m != nil {
			task, _ := strconv.Atoi(m[1])
			step, _ := strconv.Atoi(m[2])
			return task, step + 1, true
		}
		return 0, 0, false
	}
	if last.Role != "user" {
		return 0, 0, false
	}
	var parts []struct {
		Text string `json:"text"`
	}
	var text strings.Builder
	if json.Unmarshal(last.Content, &parts) == nil {
		for _, c := range parts {
			text.WriteString(c.Text)
		}
	} else {
		var s string
		_ = json.Unmarshal(last.Content, &s)
		text.WriteString(s)
	}
	return taskOf(text.String())
}

func (codexDialect) reply(w http.ResponseWriter, body []byte, task, step int, calls []agentAction, final string, u cacheUsage) {
	var req struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &req)
	id := fmt.Sprintf("t%ds%d", task, step)
	// An encrypted reasoning item first, as reasoning models send: Codex
	// echoes it back and the gateway must keep it byte for byte.
	items := []string{fmt.Sprintf(`{"type":"reasoning","id":"rs_%s","summary":[],"encrypted_content":"gAAAAB-enc-%s"}`, id, id)}
	if len(calls) == 0 {
		items = append(items, fmt.Sprintf(`{"type":"message","id":"msg_%s","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, id, final))
	}
	for i, c := range calls {
		args, _ := json.Marshal(map[string]any{"cmd": codexCommand(c), "max_output_tokens": 60000})
		items = append(items, fmt.Sprintf(`{"type":"function_call","id":"fc_%sc%d","status":"completed","call_id":"call_%sc%d","name":"exec_command","arguments":%s}`, id, i, id, i, jsonString(string(args))))
	}
	resp := func(status, out string) string {
		return fmt.Sprintf(`{"id":"resp_%s","object":"response","created_at":1,"status":%q,"model":%q,"output":[%s],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":{"input_tokens":%d,"output_tokens":20,"total_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens_details":{"reasoning_tokens":0}}}`, id, status, req.Model, out, u.input(), u.input()+20, u.read)
	}
	ev := [][2]string{{"response.created", fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, resp("in_progress", ""))}}
	for i, it := range items {
		ev = append(ev,
			[2]string{"response.output_item.added", fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":%d,"output_index":%d,"item":%s}`, 2*i+1, i, it)},
			[2]string{"response.output_item.done", fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":%d,"output_index":%d,"item":%s}`, 2*i+2, i, it)})
	}
	ev = append(ev, [2]string{"response.completed", fmt.Sprintf(`{"type":"response.completed","sequence_number":%d,"response":%s}`, 2*len(items)+1, resp("completed", strings.Join(items, ",")))})
	sse(w, ev...)
}

// codexCommand renders an action as a shell command line.
func codexCommand(a agentAction) string {
	switch a.kind {
	case actRead:
		return "cat " + a.file
	case actEdit:
		return fmt.Sprintf("sed -i 's/^%s$/%s/' %s", a.old, a.new, a.file)
	default:
		return a.cmd
	}
}

func (codexDialect) sideReply(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses") {
		var req struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(body, &req)
		responsesReply(w, req.Model, "ok", true)
		return
	}
	http.NotFound(w, r)
}
