// Package fakeprovider is a small stand-in for the providers' HTTP APIs:
// OpenAI Chat Completions and Responses, Anthropic Messages, Gemini
// generateContent, JSON and SSE,
// and GET /v1/models. It answers every request with a short assistant
// message and reports usage the way the real providers do, including a
// simulated prompt cache (cost.Simulator): the prefix a request shares with
// an earlier one of the same credential and model is reported as read from
// the cache, so the gateway's cost decisions see what they would see in
// production. It keeps the last body it received per format, for people
// who want to see what the model was sent (GET /_fake/last?format=…).
//
// It is for demos and tests on one machine: it listens where it is told and
// stores nothing but the simulated cache and the last bodies in memory.
package fakeprovider

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// maxSessions bounds the simulated caches kept (one per credential, format
// and model); past it they are all dropped, as after a long idle time.
const maxSessions = 1024

// Provider is the fake provider's HTTP handler. The zero value is ready.
type Provider struct {
	// Now is the clock of the simulated cache; time.Now when nil.
	Now func() time.Time

	mu       sync.Mutex
	sessions map[string]*cost.Simulator
	last     map[string][]byte // format → last body received
}

// Usage is one request's input tokens as the provider bills them.
type Usage struct {
	Input, CacheRead, CacheWrite, Uncached int
}

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case IsWebSocket(r): // websocket.go
		p.ServeWebSocket(w, r)
		return
	case r.Method == http.MethodGet && r.URL.Path == "/_fake/last":
		p.serveLast(w, r)
		return
	case r.Method == http.MethodGet && strings.HasSuffix(strings.TrimRight(r.URL.Path, "/"), "/models"):
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"fake-model","object":"model","type":"model","created":1,"owned_by":"fake"}],"has_more":false}`)
		return
	}
	format, ok := compiler.FormatFor(r.Method, r.URL.Path)
	if !ok {
		http.Error(w, `{"error":{"type":"not_found","message":"the fake provider answers POST chat/completions, responses and messages"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":%q}}`, "body is not JSON: "+err.Error())
		return
	}
	cred := credential(r.Header)
	if format == "gemini" { // the model is in the path, the key in a header or the query
		req.Model, cred = geminiModel(r.URL.Path), digest(geminiCredential(r))
	}
	u := p.bill(format, req.Model, cred, body)
	text := fmt.Sprintf("Fake answer to %d bytes (%d input tokens, %d read from the cache).", len(body), u.Input, u.CacheRead)
	switch format {
	case provider.Chat:
		chatReply(w, req.Model, text, req.Stream, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, u)
	case provider.Responses:
		responsesReply(w, req.Model, text, req.Stream, u)
	case "gemini":
		geminiReply(w, r, req.Model, text, u)
	default:
		messagesReply(w, req.Model, text, req.Stream, u)
	}
}

func (p *Provider) serveLast(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	b, ok := p.last[r.URL.Query().Get("format")]
	p.mu.Unlock()
	if !ok {
		http.Error(w, "no request of that format yet (format=openai_chat|openai_responses|anthropic_messages|gemini)", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// credential names the caller's cache: providers keep caches per
// organisation, and the fake keeps one per credential. Only a digest is kept.
func credential(h http.Header) string {
	c := h.Get("x-api-key")
	if c == "" {
		c = h.Get("Authorization")
	}
	return digest(c)
}

func digest(c string) string {
	sum := sha256.Sum256([]byte(c))
	return string(sum[:8])
}

// bill runs the request through its session's simulated cache.
func (p *Provider) bill(format provider.Format, model, cred string, body []byte) Usage {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = make(map[string][]byte)
	}
	p.last[string(format)] = body
	key := cred + "|" + string(format) + "|" + model
	s := p.sessions[key]
	if s == nil {
		if p.sessions == nil || len(p.sessions) >= maxSessions {
			p.sessions = make(map[string]*cost.Simulator)
		}
		s = &cost.Simulator{Model: cost.Config{}.Model(format, model)}
		p.sessions[key] = s
	}
	b := s.Step(cost.Render(format, body), now())
	u := Usage{CacheRead: int(b.Read), CacheWrite: int(b.Written), Uncached: int(b.Plain)}
	u.Input = u.CacheRead + u.CacheWrite + u.Uncached
	return u
}

const outputTokens = 16

// WriteSSE writes events ({event name or "", data}) as a server-sent
// event stream, flushing after each, as the providers stream.
func WriteSSE(w http.ResponseWriter, events ...[2]string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	for _, e := range events {
		if e[0] != "" {
			fmt.Fprintf(w, "event: %s\n", e[0])
		}
		fmt.Fprintf(w, "data: %s\n\n", e[1])
		if fl != nil {
			fl.Flush()
		}
	}
}

// WriteJSON writes v as a JSON answer.
func WriteJSON(w http.ResponseWriter, v string) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, v)
}

// chatReply answers Chat Completions. As OpenAI does, a stream reports usage
// only when stream_options.include_usage asks for it, in a last chunk
// without choices.
func chatReply(w http.ResponseWriter, model, text string, stream, streamUsage bool, u Usage) {
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d},"completion_tokens_details":{"reasoning_tokens":0}}`,
		u.Input, outputTokens, u.Input+outputTokens, u.CacheRead)
	if !stream {
		WriteJSON(w, fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":%s}`, model, text, usage))
		return
	}
	half := len(text) / 2
	chunk := func(delta, finish string) [2]string {
		return [2]string{"", fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, model, delta, finish)}
	}
	ev := [][2]string{chunk(fmt.Sprintf(`{"role":"assistant","content":%q}`, text[:half]), "null"),
		chunk(fmt.Sprintf(`{"content":%q}`, text[half:]), "null"),
		chunk(`{}`, `"stop"`)}
	if streamUsage {
		ev = append(ev, [2]string{"", fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1,"model":%q,"choices":[],"usage":%s}`, model, usage)})
	}
	WriteSSE(w, append(ev, [2]string{"", "[DONE]"})...)
}

func responsesReply(w http.ResponseWriter, model, text string, stream bool, u Usage) {
	item := fmt.Sprintf(`{"type":"message","id":"msg_fake","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, text)
	resp := func(status, out, usage string) string {
		return fmt.Sprintf(`{"id":"resp_fake","object":"response","created_at":1,"status":%q,"model":%q,"output":[%s],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":%s}`, status, model, out, usage)
	}
	usage := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`,
		u.Input, u.CacheRead, outputTokens, u.Input+outputTokens)
	if !stream {
		WriteJSON(w, resp("completed", item, usage))
		return
	}
	WriteSSE(w,
		[2]string{"response.created", fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, resp("in_progress", "", "null"))},
		[2]string{"response.output_item.added", fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":%s}`, item)},
		[2]string{"response.output_text.delta", fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_fake","output_index":0,"content_index":0,"delta":%q}`, text)},
		[2]string{"response.output_item.done", fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":%s}`, item)},
		[2]string{"response.completed", fmt.Sprintf(`{"type":"response.completed","sequence_number":4,"response":%s}`, resp("completed", item, usage))})
}

// messagesReply answers Anthropic Messages: input_tokens counts only the
// tokens neither read from nor written to the cache, as Anthropic reports.
func messagesReply(w http.ResponseWriter, model, text string, stream bool, u Usage) {
	usage := fmt.Sprintf(`"input_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d`, u.Uncached, u.CacheRead, u.CacheWrite)
	if !stream {
		WriteJSON(w, fmt.Sprintf(`{"id":"msg_fake","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{%s,"output_tokens":%d}}`, model, text, usage, outputTokens))
		return
	}
	WriteSSE(w,
		[2]string{"message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{%s,"output_tokens":1}}}`, model, usage)},
		[2]string{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		[2]string{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, text)},
		[2]string{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		[2]string{"message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, outputTokens)},
		[2]string{"message_stop", `{"type":"message_stop"}`})
}
