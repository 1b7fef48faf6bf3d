package fakeprovider

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// wsDial opens a Responses WebSocket to srv.
func wsDial(t *testing.T, srv *httptest.Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	addr := strings.TrimPrefix(srv.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /v1/responses HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer sk-fake-ws\r\n\r\n", addr)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", res, err)
	}
	return conn, br
}

// wsEnd is what the test reads of a response's last event.
type wsEnd struct {
	Type     string `json:"type"`
	Response struct {
		ID    string `json:"id"`
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

// wsCreate sends one response.create and reads up to its last event.
func wsCreate(t *testing.T, conn net.Conn, br *bufio.Reader, prev, text string, fields ...string) wsEnd {
	t.Helper()
	p := strings.Join(append(fields, ""), ",")
	if prev != "" {
		p += fmt.Sprintf(`"previous_response_id":%q,`, prev)
	}
	msg := fmt.Sprintf(`{"type":"response.create","model":"gpt-5",%s"input":[{"role":"user","content":[{"type":"input_text","text":%q}]}]}`, p, text)
	if _, err := conn.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, true, [4]byte{1, 2, 3, 4}, []byte(msg))); err != nil {
		t.Fatal(err)
	}
	for {
		_, payload, err := ReadFrame(br)
		if err != nil {
			t.Fatal(err)
		}
		var ev wsEnd
		if json.Unmarshal(payload, &ev) != nil {
			t.Fatalf("not JSON: %.80q", payload)
		}
		if ev.Type == "response.completed" || ev.Type == "error" {
			return ev
		}
	}
}

// The socket keeps its responses as the Responses WebSocket mode does:
// previous_response_id continues one of the same socket (with store false
// only the most recent), billed on the whole history (the earlier
// request's prefix read from the cache); any other id is answered
// previous_response_not_found.
func TestWebSocketResponseState(t *testing.T) {
	srv := httptest.NewServer(&Provider{})
	defer srv.Close()
	conn, br := wsDial(t, srv)
	long := strings.Repeat("the history so far ", 600)
	first := wsCreate(t, conn, br, "", long)
	second := wsCreate(t, conn, br, first.Response.ID, "and one more line")
	if second.Type != "response.completed" || second.Response.Usage.Input <= first.Response.Usage.Input || second.Response.Usage.Details.Cached == 0 {
		t.Fatalf("chained: %+v after %+v; want the whole history billed, its prefix cached", second, first)
	}
	// With store true (the default) any response of the socket can be
	// continued; with store false only the most recent one.
	if ev := wsCreate(t, conn, br, first.Response.ID, "a fork", `"store":true`); ev.Type != "response.completed" {
		t.Fatalf("store true, an older response of the socket: %+v", ev)
	}
	tests := []struct {
		name, prev string
		other      bool // on another socket
		fields     []string
	}{
		{"unknown id", "resp_unknown", false, nil},
		{"another socket's response", first.Response.ID, true, nil},
		{"store false, not the most recent", first.Response.ID, false, []string{`"store":false`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, r := conn, br
			if tc.other {
				c, r = wsDial(t, srv)
			}
			ev := wsCreate(t, c, r, tc.prev, "continue", tc.fields...)
			if ev.Type != "error" || ev.Error.Code != "previous_response_not_found" || ev.Error.Param != "previous_response_id" {
				t.Fatalf("answered %+v, want previous_response_not_found", ev)
			}
		})
	}
	if ev := wsCreate(t, conn, br, second.Response.ID, "still there"); ev.Type != "response.completed" {
		t.Fatalf("after an error the socket's responses are gone: %+v", ev)
	}
	latest := wsCreate(t, conn, br, "", "a new turn", `"store":false`)
	if ev := wsCreate(t, conn, br, latest.Response.ID, "go on", `"store":false`); ev.Type != "response.completed" {
		t.Fatalf("store false, the most recent response: %+v", ev)
	}
}

// Every response has an id of its own, as the API names them: no two
// sockets' responses share one (a gateway keys a chain's state by it).
func TestWebSocketResponseIDsUnique(t *testing.T) {
	srv := httptest.NewServer(&Provider{})
	defer srv.Close()
	seen := map[string]bool{}
	for range 2 {
		conn, br := wsDial(t, srv)
		prev := ""
		for range 2 {
			ev := wsCreate(t, conn, br, prev, "a line")
			if ev.Type != "response.completed" || ev.Response.ID == "" || seen[ev.Response.ID] {
				t.Fatalf("answered %+v; ids so far %v", ev, seen)
			}
			seen[ev.Response.ID], prev = true, ev.Response.ID
		}
	}
}
