// Package response reads provider responses as they stream past the
// gateway: plain JSON bodies and Server-Sent Events, for each request format.
// It extracts what the gateway needs to know about an answer (the provider's
// usage figures and the tool calls the model made) without ever holding a
// stream back from the client: Write is fed the bytes the client is sent,
// in pieces of any size, and never fails the response.
//
// The package is pure (no I/O, no Caddy): the caddymodule response path tees
// bytes into a Reader; recovery uses the same Reader to find its tool calls.
package response

// ToolCall is one tool call the model made in the response. Arguments are
// kept only for calls of the names the Reader was asked to keep (the
// gateway's own tool); other calls carry only their id and name.
type ToolCall struct {
	ID        string
	Name      string
	Arguments []byte
}
