package integration

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// wsClient is a minimal RFC 6455 client, as Codex's transport uses it.
type wsClient struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
	hdr  http.Header // the server's handshake answer
}

func dialWS(t testing.TB, base, path, cred string) *wsClient {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	var k [16]byte
	rand.Read(k[:])
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"+
		"OpenAI-Beta: responses_websockets=2026-02-04\r\nAuthorization: Bearer %s\r\n\r\n",
		path, addr, base64.StdEncoding.EncodeToString(k[:]), cred)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake answered %d", res.StatusCode)
	}
	return &wsClient{t: t, conn: conn, br: br, hdr: res.Header}
}

func (c *wsClient) send(fs ...[]byte) {
	c.t.Helper()
	if _, err := c.conn.Write(bytes.Join(fs, nil)); err != nil {
		c.t.Fatal(err)
	}
}

func maskedFrame(fin bool, op byte, p []byte) []byte {
	var key [4]byte
	rand.Read(key[:])
	return wsrelay.AppendFrame(nil, fin, op, true, key, p)
}

// next reads the next frame from the server: its opcode and payload.
func (c *wsClient) next() (byte, []byte) {
	c.t.Helper()
	h, p, err := fakeprovider.ReadFrame(c.br) // refuses reserved bits
	if err != nil || h.Masked || !h.Fin {
		c.t.Fatalf("server frame %+v, %v", h, err)
	}
	return h.Op, p
}

// untilCompleted reads server messages up to response.completed and
// returns their types (pongs as "pong").
func (c *wsClient) untilCompleted() []string {
	c.t.Helper()
	var types []string
	for {
		op, p := c.next()
		if op == wsrelay.OpPong {
			types = append(types, "pong:"+string(p))
			continue
		}
		var ev struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(p, &ev) != nil {
			c.t.Fatalf("server message is not JSON: %.80q", p)
		}
		types = append(types, ev.Type)
		if ev.Type == "response.completed" {
			return types
		}
	}
}

// createMessage turns a Responses body into Codex's response.create message.
func createMessage(body []byte) []byte {
	return append([]byte(`{"type":"response.create",`), body[1:]...)
}

// runWSSession sends a scripted Codex session over one socket per turn
// (Codex opens one per turn), with a ping, a fragmented message with a
// ping between its fragments and a message of another type on the way, and
// closes each socket with code 1000. It returns what the client saw.
func runWSSession(t *testing.T, base, path string, steps []fixtures.CorpusRequest, perSocket int) (seen []string, handshakes []http.Header) {
	t.Helper()
	var c *wsClient
	for i, s := range steps {
		if i%perSocket == 0 {
			if c != nil {
				c.send(maskedFrame(true, wsrelay.OpClose, []byte("\x03\xe8done")))
				if op, p := c.next(); op != wsrelay.OpClose || string(p) != "\x03\xe8done" {
					t.Fatalf("close answered %d %q", op, p)
				}
			}
			c = dialWS(t, base, path, "sk-ws-session")
			handshakes = append(handshakes, c.hdr)
		}
		msg := createMessage(s.Body)
		switch i % 4 {
		case 1:
			c.send(maskedFrame(true, wsrelay.OpPing, []byte("p1")), maskedFrame(true, wsrelay.OpText, msg))
		case 2:
			third := len(msg) / 3
			c.send(maskedFrame(false, wsrelay.OpText, msg[:third]), maskedFrame(true, wsrelay.OpPing, []byte("p2")),
				maskedFrame(false, wsrelay.OpContinuation, msg[third:2*third]), maskedFrame(true, wsrelay.OpContinuation, msg[2*third:]))
		case 3:
			c.send(maskedFrame(true, wsrelay.OpText, []byte(`{"type":"session.note","text":"not a create"}`)), maskedFrame(true, wsrelay.OpText, msg))
		default:
			c.send(maskedFrame(true, wsrelay.OpText, msg))
		}
		seen = append(seen, strings.Join(c.untilCompleted(), ","))
	}
	return seen, handshakes
}

const wsSnippet = `
	token_terminator {
		vault_dir $VAULT
		recovery api
	}
	reverse_proxy $UPSTREAM
`

// The Responses WebSocket through real Caddy: response.create messages are
// compiled (each forwarded rewrite passes the Responses checker, one log
// line per message), everything else passes in order, the client sees the
// same answers as directly, permessage-deflate is not negotiated, and the
// provider receives at least 30% fewer bytes than directly.
func TestWebSocketResponsesCompiled(t *testing.T) {
	steps := fixtures.Session(fixtures.SessionOptions{Format: "openai_responses", Steps: 16, PersonTurns: 4,
		OutputChars: 9000, ReReadEvery: 3, Seed: 4, Client: "codex"})
	for _, path := range []string{"/v1/responses", "/backend-api/codex/responses"} {
		t.Run(path, func(t *testing.T) {
			direct := &fakeprovider.Provider{}
			dsrv := httptest.NewServer(direct)
			defer dsrv.Close()
			wantSeen, _ := runWSSession(t, dsrv.URL, path, steps, 4)

			fp := &fakeprovider.Provider{}
			srv := httptest.NewServer(fp)
			defer srv.Close()
			g := startGateway(t, wsSnippet, &upstream{Server: srv})
			seen, hs := runWSSession(t, g.URL, path, steps, 4)
			for i := range wantSeen {
				if seen[i] != wantSeen[i] {
					t.Fatalf("step %d: client saw %s, directly %s", i, seen[i], wantSeen[i])
				}
			}
			for _, h := range hs {
				if h.Get("Sec-WebSocket-Extensions") != "" {
					t.Fatalf("an extension was negotiated: %q", h.Get("Sec-WebSocket-Extensions"))
				}
			}
			ws, dws := fp.WebSocket(), direct.WebSocket()
			if len(ws.Extensions) != 0 || len(dws.Extensions) != 4 {
				t.Fatalf("extension offers at the provider: %d through the gateway, %d directly", len(ws.Extensions), len(dws.Extensions))
			}
			if len(ws.Creates) != len(steps) || ws.Messages != dws.Messages {
				t.Fatalf("provider got %d creates / %d messages, want %d / %d", len(ws.Creates), ws.Messages, len(steps), dws.Messages)
			}
			rewritten := 0
			for i, got := range ws.Creates {
				orig := createMessage(steps[i].Body)
				if !bytes.Equal(got, orig) {
					rewritten++
				}
				if err := compiler.CheckCompactedKeyed("/v1/responses", orig, got); err != nil {
					t.Fatalf("step %d: forwarded message fails the Responses checker: %v", i, err)
				}
			}
			n := 0
			for _, l := range g.logLines() {
				if !strings.Contains(l, `"msg":"websocket message"`) {
					continue
				}
				n++
				// One outcome record per message, settled by its
				// response.completed: the usage it reports, the lineage
				// committed.
				if !strings.Contains(l, `"websocket":true`) || !strings.Contains(l, `"usage_input":`) || !strings.Contains(l, `"status":200`) {
					t.Fatalf("websocket message line without its answer: %s", l)
				}
			}
			if n != len(steps) {
				t.Fatalf("%d websocket message log lines, want %d", n, len(steps))
			}
			drop := 1 - float64(ws.Bytes)/float64(dws.Bytes)
			t.Logf("%s: provider bytes direct %d, through the gateway %d (%.1f%% fewer); %d of %d creates rewritten",
				path, dws.Bytes, ws.Bytes, 100*drop, rewritten, len(steps))
			if drop < 0.30 {
				t.Fatalf("bytes at the provider fell by %.1f%%, want at least 30%%", 100*drop)
			}
		})
	}
}
