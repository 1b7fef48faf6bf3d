package integration

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Tests in this file must pass with any compiler, including the stub: every
// request here must reach the upstream byte-identical.

const chatPath = "/v1/chat/completions"

func TestNonCandidateStreamsUnbuffered(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)

	for _, path := range []string{"/v1/embeddings", "/v1/files"} {
		// The upstream signals when it has read the first half, before the
		// client has sent the second half: proof that nothing buffers the body.
		firstHalf := up.signalAfter(1000)
		pr, pw := io.Pipe()
		payload := bytes.Repeat([]byte("a"), 2000)
		go func() {
			pw.Write(payload[:1000])
			select {
			case <-firstHalf:
			case <-time.After(10 * time.Second):
				pw.CloseWithError(fmt.Errorf("upstream never saw the first half: body was buffered"))
				return
			}
			pw.Write(payload[1000:])
			pw.Close()
		}()
		r := g.do(http.MethodPost, path, pr, -1)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", path, r.Status, r.Body)
		}
		got := up.last(t)
		expectSame(t, payload, got)
		if r.TT != "" {
			t.Fatalf("%s: non-candidate got header %q", path, r.TT)
		}
		if got.ContentLength != -1 {
			t.Fatalf("%s: non-candidate was re-framed (Content-Length %d)", path, got.ContentLength)
		}
	}
}

func TestGetUntouched(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	r := g.do(http.MethodGet, chatPath, nil, 0)
	if r.Status != http.StatusOK || r.TT != "" {
		t.Fatalf("GET: status %d header %q", r.Status, r.TT)
	}
	if got := up.last(t); got.Method != http.MethodGet || len(got.Body) != 0 {
		t.Fatalf("upstream got %s with %d bytes", got.Method, len(got.Body))
	}
}

func TestNothingToDoIsByteIdentical(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	// small tool results, odd but valid formatting: nothing to replace
	bodies := [][]byte{
		newConversation("sys", "hi").tool("bash", `{"cmd":"ls"}`, "a.go\nb.go\n").body(),
		[]byte("{\n  \"model\" : \"gpt-4o\",\n  \"messages\":[{\"role\":\"user\",\"content\":\"caf\\u00e9 \\ud83d\\ude00\"}],\n  \"temperature\": 1.0e0, \"x\":{\"z\":1,\"a\":2}\n}\n"),
		// a large tool result seen for the first time stays inline
		newConversation("sys", "read it").tool("cat", `{"path":"big.txt"}`, bigOutput("first", 20000)).body(),
	}
	for i, b := range bodies {
		r := g.post(chatPath, b, "Authorization: Bearer sk-test-1")
		if r.Status != http.StatusOK {
			t.Fatalf("body %d: status %d", i, r.Status)
		}
		got := up.last(t)
		expectSame(t, b, got)
		expectPassthroughHeader(t, chatPath, r, "")
		if got.ContentLength != int64(len(b)) {
			t.Fatalf("body %d: upstream Content-Length %d, want %d", i, got.ContentLength, len(b))
		}
		if got.Header.Get("Authorization") != "Bearer sk-test-1" {
			t.Fatal("credential header not forwarded as is")
		}
	}
}

// badInputs are candidate bodies the compiler must forward byte-identical.
func badInputs() map[string][]byte {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	deepObj := `{"model":"gpt-4o","messages":[{"role":"tool","content":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000) + `}]}`
	big := bigOutput("odd", 9000)
	return map[string][]byte{
		"empty":                 {},
		"whitespace":            []byte(" \n\t "),
		"non-JSON":              []byte("model=gpt-4o&messages=hello"),
		"truncated JSON":        []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hel`),
		"trailing garbage":      []byte(`{"model":"gpt-4o","messages":[]} x`),
		"top-level array":       []byte(`[{"role":"user","content":"hi"}]`),
		"top-level string":      []byte(`"just a string"`),
		"top-level number":      []byte(`42`),
		"null":                  []byte(`null`),
		"messages not a list":   []byte(`{"model":"gpt-4o","messages":{"role":"user","content":"hi"}}`),
		"messages null":         []byte(`{"model":"gpt-4o","messages":null}`),
		"message not an object": []byte(`{"model":"gpt-4o","messages":["hi",1,null,true]}`),
		"tool content odd types": []byte(`{"model":"gpt-4o","messages":[{"role":"tool","tool_call_id":"x","content":12345},` +
			`{"role":"tool","tool_call_id":"y","content":{"text":"` + big + `"}},{"role":"tool","content":[1,2,{"type":"image"}]},` +
			`{"role":"tool","content":null},{"role":"tool","content":true}]}`),
		"invalid UTF-8":          append(append([]byte(`{"model":"gpt-4o","messages":[{"role":"tool","tool_call_id":"c","content":"`), append([]byte(big[:8500]), 0xff, 0xfe, 0xc3)...), []byte(`"}]}`)...),
		"duplicate keys":         []byte(`{"model":"gpt-4o","model":"gpt-4.1","messages":[],"messages":[{"role":"tool","content":"` + big + `","content":"x"}]}`),
		"10000-deep nesting":     []byte(deep),
		"10000-deep in messages": []byte(deepObj),
		// a tool result whose tool_call_id matches no assistant call
		"tool_call_id matching nothing": marshal(map[string]any{"model": "gpt-4o", "messages": []msg{
			{Role: "user", Content: "u"},
			{Role: "tool", ToolCallID: "call_nowhere", Content: bigOutput("orphan", 9000)},
		}}),
		"bad escapes":     []byte(`{"model":"gpt-4o","messages":[{"role":"tool","content":"\q\u12"}]}`),
		"lone surrogates": []byte(`{"model":"gpt-4o","messages":[{"role":"tool","tool_call_id":"c","content":"\ud800` + big + `\udc00"}]}`),
		"NUL bytes":       []byte("{\"model\":\"gpt-4o\",\x00\"messages\":[]}"),
	}
}

func TestBadInputsForwardedByteIdentical(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	// warm up (first-use allocations, listeners) before the leak baseline
	g.post(chatPath, []byte(`{}`))
	checkLeaks := goroutineBaseline(t, up)

	for name, body := range badInputs() {
		t.Run(name, func(t *testing.T) {
			for _, te := range []string{"content-length", "chunked"} {
				var r response
				if te == "chunked" {
					r = g.do(http.MethodPost, chatPath, bytes.NewReader(body), -1)
				} else {
					r = g.post(chatPath, body)
				}
				if r.Status != http.StatusOK {
					t.Fatalf("%s: status %d: %s", te, r.Status, r.Body)
				}
				got := up.last(t)
				expectSame(t, body, got)
				expectPassthroughHeader(t, chatPath, r, "")
				if len(body) > 0 && got.ContentLength != int64(len(body)) && isCandidate(chatPath) {
					t.Fatalf("%s: upstream Content-Length %d, want %d", te, got.ContentLength, len(body))
				}
			}
		})
	}
	checkLeaks()
}

func TestHugeBodyStreamsThrough(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB body")
	}
	up := newUpstream(t)
	// Count the bytes instead of keeping them: the test must not need
	// 100 MB itself.
	type sum struct {
		n   int64
		sha [32]byte
	}
	sums := make(chan sum, 2)
	up.onBody = func(r *http.Request) ([]byte, error) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		var s sum
		s.n = n
		copy(s.sha[:], h.Sum(nil))
		sums <- s
		return nil, err
	}
	g := startGateway(t, defaultSnippet, up)
	checkLeaks := goroutineBaseline(t, up)

	const size = 50 << 20
	body := make([]byte, size)
	prefix := []byte(`{"model":"gpt-4o","messages":[{"role":"tool","tool_call_id":"c","content":"`)
	copy(body, prefix)
	for i := len(prefix); i < size-3; i++ {
		body[i] = 'a' + byte(i%26)
	}
	copy(body[size-3:], `"}]`) // (not valid JSON: never parsed anyway)
	want := sha256.Sum256(body)

	for _, te := range []string{"content-length", "chunked"} {
		var r response
		if te == "chunked" {
			r = g.do(http.MethodPost, chatPath, bytes.NewReader(body), -1)
		} else {
			r = g.post(chatPath, body)
		}
		if r.Status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", te, r.Status, r.Body)
		}
		s := <-sums
		if s.n != size || s.sha != want {
			t.Fatalf("%s: upstream got %d bytes, not the identical %d", te, s.n, size)
		}
		expectPassthroughHeader(t, chatPath, r, "too_large")
		if te == "content-length" && isCandidate(chatPath) && !strings.Contains(r.TT, fmt.Sprintf("raw_bytes=%d;", size)) {
			t.Errorf("header %q does not report raw_bytes=%d", r.TT, size)
		}
	}
	checkLeaks()
}

func TestTooLargeChunkedStreamsUnbuffered(t *testing.T) {
	up := newUpstream(t)
	// max_body_size 1KB: the gateway may read 1KB+1 before deciding, then
	// must stream the rest while the client is still sending.
	firstPart := up.signalAfter(4096)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		max_body_size 1KB
	}
	reverse_proxy $UPSTREAM
`, up)
	payload := bytes.Repeat([]byte("z"), 8192)
	pr, pw := io.Pipe()
	go func() {
		pw.Write(payload[:4096])
		select {
		case <-firstPart:
		case <-time.After(10 * time.Second):
			pw.CloseWithError(fmt.Errorf("upstream never saw the first part: body was buffered"))
			return
		}
		pw.Write(payload[4096:])
		pw.Close()
	}()
	r := g.do(http.MethodPost, chatPath, pr, -1)
	if r.Status != http.StatusOK {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	expectSame(t, payload, up.last(t))
	expectPassthroughHeader(t, chatPath, r, "too_large")
}

// An encoded body the gateway decodes (gzip) is compiled; with nothing to
// replace the client's exact bytes go on, still gzip. A coding it does not
// decode (deflate) passes through as content_encoding.
func TestEncodedBodyPassesThrough(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(newConversation("sys", "u").tool("bash", "{}", bigOutput("gz", 9000)).body())
	zw.Close()
	for _, tc := range []struct{ coding, reason string }{{"gzip", "nothing_to_replace"}, {"deflate", "content_encoding"}} {
		body := zb.Bytes()
		r := g.post(chatPath, body, "Content-Encoding: "+tc.coding)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: status %d", tc.coding, r.Status)
		}
		got := up.last(t)
		expectSame(t, body, got)
		if got.Header.Get("Content-Encoding") != tc.coding {
			t.Fatalf("%s: Content-Encoding not forwarded", tc.coding)
		}
		expectPassthroughHeader(t, chatPath, r, tc.reason)
	}
}

func TestChunkedCandidateGetsContentLength(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	body := newConversation("sys", "hello").body()
	r := g.do(http.MethodPost, chatPath, bytes.NewReader(body), -1)
	if r.Status != http.StatusOK {
		t.Fatalf("status %d", r.Status)
	}
	got := up.last(t)
	expectSame(t, body, got)
	if isCandidate(chatPath) {
		if got.ContentLength != int64(len(body)) || len(got.TransferEncoding) != 0 {
			t.Fatalf("buffered candidate: upstream Content-Length %d, Transfer-Encoding %v; want %d and none",
				got.ContentLength, got.TransferEncoding, len(body))
		}
	}
}

// reverse_proxy retries to another upstream after the first one fails to
// connect; the (buffered) body must arrive whole.
func TestRetryToSecondUpstream(t *testing.T) {
	up := newUpstream(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // connection refused from now on
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
	}
	reverse_proxy `+deadAddr+` $UPSTREAM {
		lb_policy first
		lb_retries 3
		fail_duration 30s
	}
`, up)
	bodies := [][]byte{
		newConversation("sys", "retry me").tool("bash", "{}", bigOutput("retry", 12000)).body(),
		[]byte(`not json`),
	}
	for _, b := range bodies {
		r := g.post(chatPath, b)
		if r.Status != http.StatusOK {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
		got := up.last(t)
		expectSame(t, b, got)
		if got.ContentLength != int64(len(b)) {
			t.Fatalf("Content-Length %d, want %d", got.ContentLength, len(b))
		}
	}
}

// The log line: one per candidate, no content, no credentials.
func TestLogLineHasNoSecrets(t *testing.T) {
	if !isCandidate(chatPath) {
		t.Skip("compiler.FormatFor does not accept chat completions yet (stub)")
	}
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("secret-output", 9000)
	args := `{"cmd":"cat /etc/very-secret-args"}`
	c := newConversation("sys", "u").tool("bash", args, out)
	g.post(chatPath, c.body(), "Authorization: Bearer sk-live-SECRET")
	g.post("/v1/embeddings", []byte(`{}`), "Authorization: Bearer sk-live-SECRET")
	c.say("done", "again")
	g.post(chatPath, c.body(), "Authorization: Bearer sk-live-SECRET")
	lines := g.logLines()
	if len(lines) != 2 {
		t.Fatalf("%d token_terminator log lines, want 2 (one per candidate):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		for _, secret := range []string{"sk-live-SECRET", "very-secret-args", out[:30], "Bearer"} {
			if strings.Contains(l, secret) {
				t.Fatalf("log line leaks %q: %s", secret, l)
			}
		}
		for _, field := range []string{`"decision":`, `"raw_bytes":`, `"sent_bytes":`, `"receipts":`, `"total_ms":`} {
			if !strings.Contains(l, field) {
				t.Errorf("log line lacks %s: %s", field, l)
			}
		}
	}
}

// signalAfter makes the upstream close the returned channel once it has read
// the first n bytes of the next request body, then read the rest.
func (u *upstream) signalAfter(n int) <-chan struct{} {
	read := make(chan struct{})
	u.onBody = func(r *http.Request) ([]byte, error) {
		head := make([]byte, n)
		if _, err := io.ReadFull(r.Body, head); err != nil {
			return head, err
		}
		close(read)
		rest, err := io.ReadAll(r.Body)
		return append(head, rest...), err
	}
	return read
}
