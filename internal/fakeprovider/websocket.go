package fakeprovider

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// The Responses WebSocket: GET …/responses with Upgrade: websocket. Each
// text message of type response.create is answered, on the same socket, by
// the events a streamed Responses answer carries (response.created …
// response.completed, whose usage comes from the simulated prompt cache);
// a ping is answered by a pong and a close by a close. No extension is
// negotiated. As in the Responses API's WebSocket mode, a message's
// previous_response_id resolves only against the responses produced on
// the same socket, with store false only against the most recent one
// (Conversation; an unknown one is answered with an error event,
// previous_response_not_found), and usage is billed on the whole history
// the message stands for: the responses it continues, then its input.

// WebSocketStats is what the fake provider received over its sockets.
type WebSocketStats struct {
	Sockets    int      // upgrades accepted
	Messages   int      // text messages
	Bytes      int64    // text message payload bytes
	Extensions []string // Sec-WebSocket-Extensions offers seen in handshakes
	Creates    [][]byte // response.create messages, in order
}

type wsState struct {
	mu sync.Mutex
	st WebSocketStats
}

var wsStates sync.Map // *Provider → *wsState

func (p *Provider) ws() *wsState {
	v, _ := wsStates.LoadOrStore(p, &wsState{})
	return v.(*wsState)
}

// WebSocket returns a copy of what the provider received over WebSockets.
func (p *Provider) WebSocket() WebSocketStats {
	s := p.ws()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Extensions = append([]string(nil), st.Extensions...)
	st.Creates = append([][]byte(nil), st.Creates...)
	return st
}

// IsWebSocket reports a WebSocket upgrade to a Responses path.
func IsWebSocket(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		strings.HasSuffix(strings.TrimRight(r.URL.Path, "/"), "/responses")
}

// ServeWebSocket serves one Responses WebSocket.
func (p *Provider) ServeWebSocket(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if key == "" {
		http.Error(w, "missing Sec-WebSocket-Key", http.StatusBadRequest)
		return
	}
	st := p.ws()
	st.accepted(r.Header)
	conn, brw, ok := Upgrade(w, key)
	if !ok {
		return
	}
	defer conn.Close()
	cred := credential(r.Header)
	send := func(op byte, p []byte) error {
		_, err := conn.Write(wsrelay.AppendFrame(nil, true, op, false, [4]byte{}, p))
		return err
	}
	conv := &Conversation{}
	ServeFrames(brw.Reader, send, func(msg []byte) error {
		st.received(msg)
		model, ok := createModel(msg)
		if !ok {
			return nil
		}
		st.created(msg)
		return p.answerCreate(send, conv, model, cred, msg)
	})
}

// ServeFrames reads a client's frames: pings are answered, a close is
// echoed and ends the socket, fragments are joined, and each whole text
// message goes to onText (its own copy); an error from onText ends the
// socket. The fake provider and the tests' own WebSocket servers share it.
func ServeFrames(r *bufio.Reader, send func(op byte, p []byte) error, onText func([]byte) error) {
	var msg []byte
	var op byte
	for {
		h, payload, err := ReadFrame(r)
		if err != nil {
			return
		}
		switch h.Op {
		case wsrelay.OpPing:
			if send(wsrelay.OpPong, payload) != nil {
				return
			}
			continue
		case wsrelay.OpPong:
			continue
		case wsrelay.OpClose:
			_ = send(wsrelay.OpClose, payload)
			return
		case wsrelay.OpText, wsrelay.OpBinary:
			op, msg = h.Op, append(msg[:0], payload...)
		default:
			msg = append(msg, payload...)
		}
		if !h.Fin || op != wsrelay.OpText {
			continue
		}
		if onText(append([]byte(nil), msg...)) != nil {
			return
		}
	}
}

// Upgrade hijacks the connection and completes the server's side of the
// WebSocket handshake for the client's Sec-WebSocket-Key (no extension);
// false when either fails. The fake provider and the tests' own WebSocket
// servers share it.
func Upgrade(w http.ResponseWriter, key string) (net.Conn, *bufio.ReadWriter, bool) {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		base64.StdEncoding.EncodeToString(sum[:]))
	if brw.Flush() != nil {
		conn.Close()
		return nil, nil, false
	}
	return conn, brw, true
}

// accepted counts an upgrade and the extensions its handshake offered.
func (s *wsState) accepted(h http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Sockets++
	if e := h.Get("Sec-WebSocket-Extensions"); e != "" {
		s.st.Extensions = append(s.st.Extensions, e)
	}
}

// received counts a whole text message.
func (s *wsState) received(msg []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Messages++
	s.st.Bytes += int64(len(msg))
}

// created keeps a copy of a response.create message.
func (s *wsState) created(msg []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Creates = append(s.st.Creates, append([]byte(nil), msg...))
}

// createModel returns the model a response.create message names; false
// for any other message.
func createModel(msg []byte) (string, bool) {
	var req struct {
		Type  string `json:"type"`
		Model string `json:"model"`
	}
	if json.Unmarshal(msg, &req) != nil || req.Type != "response.create" {
		return "", false
	}
	return req.Model, true
}

// answerCreate bills the response.create message msg on the whole
// history it stands for and sends, through send, the events of its
// streamed answer; a previous_response_id the socket did not produce is
// answered with the API's error event.
func (p *Provider) answerCreate(send func(byte, []byte) error, conv *Conversation, model, cred string, msg []byte) error {
	whole, prev, ok := conv.Resolve(msg)
	if !ok {
		return send(wsrelay.OpText, PreviousResponseNotFound(prev))
	}
	id := conv.nextID()
	u := p.bill("openai_responses", model, cred, WholeBody(msg, whole))
	text := fmt.Sprintf("Fake answer to %d bytes (%d input tokens, %d read from the cache).", len(msg), u.Input, u.CacheRead)
	events := responsesEvents(id, model, text, u)
	conv.Keep(id, whole, []byte(fmt.Sprintf(`{"type":"message","id":"msg_%s","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, id, text)))
	for _, ev := range events {
		if err := send(wsrelay.OpText, []byte(ev)); err != nil {
			return err
		}
	}
	return nil
}

// ReadFrame reads one frame (a client's, masked, or a server's) and
// unmasks a masked payload; a frame with reserved bits set or a payload
// over 64 MiB is refused.
func ReadFrame(r *bufio.Reader) (wsrelay.Header, []byte, error) {
	b, err := r.Peek(2)
	if err != nil {
		return wsrelay.Header{}, nil, err
	}
	size := 2 + map[byte]int{126: 2, 127: 8}[b[1]&0x7F]
	if b[1]&0x80 != 0 {
		size += 4
	}
	if b, err = r.Peek(size); err != nil {
		return wsrelay.Header{}, nil, err
	}
	h, _, err := wsrelay.ParseHeader(b)
	if err != nil || h.Rsv != 0 || h.Length > 64<<20 {
		return h, nil, fmt.Errorf("fake provider: frame refused")
	}
	r.Discard(size)
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(r, p); err != nil {
		return h, nil, err
	}
	if h.Masked {
		wsrelay.MaskBytes(h.Key, 0, p)
	}
	return h, p, nil
}

// responsesEvents is a streamed Responses answer as WebSocket messages.
func responsesEvents(id, model, text string, u Usage) []string {
	item := fmt.Sprintf(`{"type":"message","id":"msg_%s","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, id, text)
	resp := func(status, out, usage string) string {
		return fmt.Sprintf(`{"id":%q,"object":"response","created_at":1,"status":%q,"model":%q,"output":[%s],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":%s}`, id, status, model, out, usage)
	}
	usage := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`,
		u.Input, u.CacheRead, outputTokens, u.Input+outputTokens)
	return []string{
		fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, resp("in_progress", "", "null")),
		fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":%s}`, item),
		fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_%s","output_index":0,"content_index":0,"delta":%q}`, id, text),
		fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":%s}`, item),
		fmt.Sprintf(`{"type":"response.completed","sequence_number":4,"response":%s}`, resp("completed", item, usage)),
	}
}
