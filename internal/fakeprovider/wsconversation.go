package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync/atomic"
)

// maxSocketResponses bounds the responses one socket keeps for
// previous_response_id; past it the oldest are forgotten, and a message
// continuing one is answered previous_response_not_found.
const maxSocketResponses = 64

// Conversation is one socket's responses, each with the whole history it
// ends (the history its request stood for, then its output), as the
// Responses WebSocket mode keeps them: a previous_response_id resolves
// only against responses produced on the same socket, and with store
// false only against the most recent one (the service keeps that one in
// the connection's memory and stores none). The zero value is ready; it
// is not safe for concurrent use (a socket's messages are answered in
// order).
type Conversation struct {
	order []string
	last  string
	hist  map[string][]json.RawMessage
}

// responseIDs numbers the responses the process's fake providers
// produce, on every socket: the Responses API names each response
// uniquely, so no two responses (two sockets' first, two turns'
// warm-ups) share an id, and a client or gateway that keys state by it
// meets here what it meets there.
var responseIDs atomic.Uint64

// ResponseID is a new response id, unique in the process: "resp_",
// kind (what produced it, for a reader of the test's log), a number.
func ResponseID(kind string) string {
	return fmt.Sprintf("resp_%s%d", kind, responseIDs.Add(1))
}

func (c *Conversation) nextID() string { return ResponseID("ws") }

// Resolve returns the whole history a response.create message stands for
// and its previous_response_id; false when the socket cannot continue
// that id (not one of its responses, or with store false not its most
// recent one).
func (c *Conversation) Resolve(msg []byte) (whole []json.RawMessage, prev string, ok bool) {
	var req struct {
		Prev  string          `json:"previous_response_id"`
		Store *bool           `json:"store"`
		Input json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(msg, &req)
	if req.Prev != "" {
		h, found := c.hist[req.Prev]
		if !found || req.Store != nil && !*req.Store && req.Prev != c.last {
			return nil, req.Prev, false
		}
		whole = append(whole, h...)
	}
	var items []json.RawMessage
	if json.Unmarshal(req.Input, &items) == nil {
		whole = append(whole, items...)
	} else if len(req.Input) > 0 && req.Input[0] == '"' { // a string input is one user message
		whole = append(whole, json.RawMessage(`{"role":"user","content":`+string(req.Input)+`}`))
	}
	return whole, req.Prev, true
}

// Keep records response id, produced on this socket with output for the
// whole history whole.
func (c *Conversation) Keep(id string, whole []json.RawMessage, output ...json.RawMessage) {
	if c.hist == nil {
		c.hist = make(map[string][]json.RawMessage)
	}
	if len(c.order) >= maxSocketResponses {
		delete(c.hist, c.order[0])
		c.order = c.order[1:]
	}
	c.order, c.last = append(c.order, id), id
	c.hist[id] = append(append([]json.RawMessage(nil), whole...), output...)
}

// PreviousResponseNotFound is the error event the Responses WebSocket
// sends for a previous_response_id the socket cannot continue.
func PreviousResponseNotFound(id string) []byte {
	msg, _ := json.Marshal(fmt.Sprintf("Previous response with id '%s' not found.", id))
	return []byte(`{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"previous_response_not_found","message":` + string(msg) + `,"param":"previous_response_id"}}`)
}

// WholeBody is the Responses body a response.create message stands for:
// its own fields with the whole history as input, without the socket's
// fields (type, previous_response_id, generate). The prompt cache and the
// bill see this body, as the provider renders it for the model.
func WholeBody(msg []byte, whole []json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil {
		return msg
	}
	for _, k := range []string{"type", "previous_response_id", "generate"} {
		delete(m, k)
	}
	m["input"] = append(append([]byte("["), bytes.Join(rawBytes(whole), []byte(","))...), ']')
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as the clients encode: the bytes billed are theirs
	if enc.Encode(m) != nil {
		return msg
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func rawBytes(items []json.RawMessage) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}
