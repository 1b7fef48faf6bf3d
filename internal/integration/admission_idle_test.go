package integration

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// Sockets that declare large bodies and send nothing (or a trickle) hold
// only what they sent, never max_buffered_bytes on the strength of their
// Content-Length: with the default budget, two idle sockets declaring 32
// and 19 MiB (5× of which once filled the 256 MiB default) do not make
// another caller's request passthrough=busy. The idle ones end at
// body_read_timeout (default 30s), passed through as slow_body.
func TestIdleDeclaredBodiesDoNotStarveOthers(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	addr := strings.TrimPrefix(g.URL, "http://")
	for _, n := range []int{32 << 20, 19 << 20} {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// The headers and the body's first byte: the handler is reading it.
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer sk-idle-%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", addr, n, n)
	}
	// Let the gateway take both requests in (it answers neither until
	// their bodies are whole or body_read_timeout).
	time.Sleep(500 * time.Millisecond)

	c := newConversation("You are a coding agent.", "list the files")
	for i := range 3 {
		c.tool("bash", fmt.Sprintf(`{"command":"cat f%d"}`, i), bigOutput(fmt.Sprint("idle", i), 300_000))
	}
	r := g.post("/v1/chat/completions", c.body(), "Authorization: Bearer sk-other", "Content-Type: application/json")
	if r.Status != 200 || strings.Contains(r.TT, "passthrough=busy") {
		t.Fatalf("another caller's request next to two idle sockets: status %d, %s %q", r.Status, "Token-Terminator", r.TT)
	}
}
