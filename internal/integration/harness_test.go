// Package integration runs Token Terminator inside a real, in-process Caddy
// with reverse_proxy to an httptest upstream that records what it received.
//
// Caddy is a process-wide singleton, so these tests never run in parallel
// with each other; concurrency is tested with concurrent requests.
package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/tokenterminator/caddy-token-terminator/caddymodule"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// TestMain points Caddy's data and config directories at a temporary
// directory so that no test touches the user's real Caddy state.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tt-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The tests that build cmd/caddy keep the user's Go build cache:
	// HOME changes below, and a cold cache rebuilds Caddy from scratch.
	if os.Getenv("GOCACHE") == "" {
		if c, err := os.UserCacheDir(); err == nil {
			os.Setenv("GOCACHE", filepath.Join(c, "go-build"))
		}
	}
	os.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	os.Setenv("HOME", dir)
	// Released request body buffers are poisoned, so a use after release
	// shows in every forwarded body the suite checks (caddymodule/bodybuf.go);
	// not while benchmarking.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Setenv("TT_TEST_POISON_BODIES", "1")
	}
	code := m.Run()
	_ = caddy.Stop()
	os.RemoveAll(dir)
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// received is one request as the upstream saw it.
type received struct {
	Method           string
	Path             string
	Header           http.Header
	Body             []byte
	ContentLength    int64
	TransferEncoding []string
}

// upstream is an httptest server that records every request it receives.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
	// onBody, if set, replaces the default body read: it must consume
	// r.Body and return it.
	onBody func(r *http.Request) ([]byte, error)
	// respond, if set, may answer the n-th request (from 0) itself; it
	// returns false to leave it to the default JSON answer.
	respond func(n int, w http.ResponseWriter) bool
}

func newUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerVerification(w, r) {
			return
		}
		var body []byte
		var err error
		if u.onBody != nil {
			body, err = u.onBody(r)
		} else {
			body, err = io.ReadAll(r.Body)
		}
		rec := received{
			Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body,
			ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding,
		}
		u.mu.Lock()
		n := len(u.reqs)
		u.reqs = append(u.reqs, rec)
		u.mu.Unlock()
		if err != nil {
			http.Error(w, "upstream read error: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if u.respond != nil && u.respond(n, w) {
			return
		}
		fmt.Fprintf(w, `{"id":"resp","received_bytes":%d}`, len(body))
	}))
	t.Cleanup(u.Close)
	return u
}

// verifyHeader marks the request a harness sends to have the provider
// accept a credential once (gateway.verify): the fake provider answers it
// 200 without recording it, as a real provider answers a valid key.
const verifyHeader = "X-Harness-Verify"

// answerVerification answers a verification request; false for others.
func answerVerification(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get(verifyHeader) == "" {
		return false
	}
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, `{"id":"verify"}`)
	return true
}

// statusFor answers request n with status code, when it is not 0.
func statusFor(code func(n int) int) func(n int, w http.ResponseWriter) bool {
	return func(n int, w http.ResponseWriter) bool {
		c := code(n)
		if c == 0 {
			return false
		}
		w.WriteHeader(c)
		fmt.Fprintf(w, `{"error":{"code":%d}}`, c)
		return true
	}
}

// resetMidStream starts a 200 event stream, then drops the connection.
func resetMidStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "data: {\"partial\":")
	http.NewResponseController(w).Flush()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// addr is the upstream's host:port, as reverse_proxy wants it.
func (u *upstream) addr() string { return strings.TrimPrefix(u.URL, "http://") }

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

// last returns the most recent request the upstream received.
func (u *upstream) last(t testing.TB) received {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("upstream received no request")
	}
	return u.reqs[len(u.reqs)-1]
}

// all returns a copy of every request received so far.
func (u *upstream) all() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.reqs...)
}

// gateway is a running in-process Caddy.
type gateway struct {
	t        testing.TB
	URL      string // http://127.0.0.1:port
	port     int
	VaultDir string
	LogFile  string
	client   *http.Client
	// noVerify turns off the credential verification try does before a
	// credential's first candidate (tests of unverified credentials).
	noVerify bool
	verifyMu sync.Mutex
	verified map[string]bool // credentials verified through this gateway
	// reloaded is set by reload: for a moment after caddy.Load the shared
	// listener may still hand a new connection to the server being shut
	// down, which resets it. The next post may retry once on such an error;
	// no other request retries, so real failures are not masked.
	reloaded bool
}

// gatewayConfig renders a Caddyfile for one site on port. The site body is
// the snippet with $UPSTREAM and $VAULT replaced.
func gatewayConfig(port int, logFile, snippet, upstreamAddr, vaultDir string) string {
	site := strings.NewReplacer("$UPSTREAM", upstreamAddr, "$VAULT", vaultDir).Replace(snippet)
	return fmt.Sprintf(`{
	admin off
	persist_config off
	grace_period 2s
	log {
		output file %q
		format json
		level INFO
	}
}

http://127.0.0.1:%d {
%s
}
`, logFile, port, site)
}

// defaultSnippet is token_terminator in front of reverse_proxy, with a
// small min_artifact_chars so fixtures stay small.
const defaultSnippet = `
	token_terminator {
		vault_dir $VAULT
	}
	reverse_proxy $UPSTREAM
`

// startGateway starts Caddy with snippet as the body of one site and
// returns once it is listening. A fresh vault directory is used unless
// vaultDir is given.
func startGateway(t testing.TB, snippet string, up *upstream, vaultDir ...string) *gateway {
	t.Helper()
	tmp := t.TempDir()
	g := &gateway{t: t, port: freePort(t), VaultDir: filepath.Join(tmp, "vault"), LogFile: filepath.Join(tmp, "caddy.log")}
	if len(vaultDir) > 0 {
		g.VaultDir = vaultDir[0]
	}
	g.URL = fmt.Sprintf("http://127.0.0.1:%d", g.port)
	g.client = &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true},
		Timeout:   2 * time.Minute,
	}
	upAddr := ""
	if up != nil {
		upAddr = up.addr()
	}
	g.load(gatewayConfig(g.port, g.LogFile, snippet, upAddr, g.VaultDir))
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping caddy: %v", err)
		}
	})
	return g
}

// reload loads a new Caddyfile snippet into the running Caddy, on the same
// port and (unless the snippet says otherwise) the same vault directory.
func (g *gateway) reload(snippet string, up *upstream) {
	g.t.Helper()
	gen := strconv.FormatInt(reloadGeneration.Add(1), 10)
	site := fmt.Sprintf("http://127.0.0.1:%d {\n", g.port)
	cfg := strings.Replace(gatewayConfig(g.port, g.LogFile, snippet, up.addr(), g.VaultDir), site,
		site+"\trespond "+generationPath+" \""+gen+"\" 200\n", 1)
	g.load(cfg)
	g.reloaded = true
	g.awaitGeneration(gen)
}

// reloadGeneration numbers the configs reload loads; generationPath
// answers with the number of the config that served the request.
var reloadGeneration atomic.Int64

const generationPath = "/__harness/generation"

// awaitGeneration returns once the config numbered gen serves new
// connections. caddy.Load returns when the old servers have been told to
// shut down, and Caddy says (caddyhttp App.Stop) the scheduler may still
// let one accept a connection right after: a test's next request could
// then be served by the old config. Three answers in a row from the new one
// (each a new connection) say the old listener is gone.
func (g *gateway) awaitGeneration(gen string) {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for inRow := 0; inRow < 3; {
		if time.Now().After(deadline) {
			g.t.Fatalf("config %s never served %s after the reload", gen, generationPath)
		}
		resp, err := g.client.Get(g.URL + generationPath)
		if err != nil {
			inRow = 0
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) == gen {
			inRow++
		} else {
			inRow = 0
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func (g *gateway) load(caddyfileText string) {
	g.t.Helper()
	cfgJSON, err := adaptCaddyfile(caddyfileText)
	if err != nil {
		g.t.Fatalf("adapting Caddyfile: %v\n%s", err, caddyfileText)
	}
	if err := caddy.Load(cfgJSON, true); err != nil {
		g.t.Fatalf("loading config: %v\n%s", err, cfgJSON)
	}
}

func adaptCaddyfile(text string) ([]byte, error) {
	adapter := caddyconfig.GetAdapter("caddyfile")
	out, _, err := adapter.Adapt([]byte(text), map[string]any{"filename": "Caddyfile"})
	return out, err
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// response is what the client got back.
type response struct {
	Status int
	Header http.Header
	Body   []byte
	TT     string // the Token-Terminator header
}

// post sends body to path with the given headers ("Key: value" pairs).
func (g *gateway) post(path string, body []byte, headers ...string) response {
	g.t.Helper()
	if g.reloaded {
		g.reloaded = false
		if r, err := g.try(http.MethodPost, path, bytes.NewReader(body), int64(len(body)), headers...); err == nil {
			return r
		} else if !listenerReset(err) {
			g.t.Fatalf("POST %s: %v", path, err)
		}
	}
	return g.do(http.MethodPost, path, bytes.NewReader(body), int64(len(body)), headers...)
}

// listenerReset reports a connection reset or closed before any response:
// what a client sees when its connection was queued on a listener socket
// that a reload closed (see runLoad). A client still writing its body when
// the reset arrives sees it as a broken pipe (EPIPE), or as a write on a
// closed connection (net.ErrClosed) when the transport closed it first.
func listenerReset(err error) bool {
	return err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed))
}

// do sends a request; contentLength -1 sends the body chunked.
func (g *gateway) do(method, path string, body io.Reader, contentLength int64, headers ...string) response {
	g.t.Helper()
	r, err := g.try(method, path, body, contentLength, headers...)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// try sends a request and returns a transport error instead of failing.
func (g *gateway) try(method, path string, body io.Reader, contentLength int64, headers ...string) (response, error) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.URL+path, body)
	if err != nil {
		g.t.Fatal(err)
	}
	req.ContentLength = contentLength
	if contentLength < 0 {
		req.TransferEncoding = []string{"chunked"}
	}
	if body == nil {
		req.ContentLength = 0
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			g.t.Fatalf("bad header %q", h)
		}
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if !hasCredentialHeader(req.Header) {
		req.Header.Set("Authorization", defaultCredential)
	}
	if method == http.MethodPost && isCandidate(path) && !g.noVerify {
		g.verifyHeaders(path, req.Header)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	g.noteAnswered(resp)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: rb, TT: resp.Header.Get(caddymodule.HeaderName)}, nil
}

// verify has the provider accept the credential of headers ("Key: value"
// pairs; the default credential when they name none) once through the
// gateway, as a client's first request would: the gateway gives a tenant
// vault state only once the provider has answered one of its requests
// with a 2xx. Tests whose requests do not go through post (SDKs, agent
// CLIs, the browser) call it before their first request.
func (g *gateway) verify(path string, headers ...string) {
	g.t.Helper()
	h := http.Header{}
	for _, kv := range headers {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			g.t.Fatalf("bad header %q", kv)
		}
		h.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if !hasCredentialHeader(h) {
		h.Set("Authorization", defaultCredential)
	}
	g.verifyHeaders(path, h)
}

// verifyHeaders sends the verification request of h to path unless this
// gateway verified the same identity headers before. The provider answers
// it 200 without recording it (verifyHeader); its log line has
// passthrough=unverified_tenant.
func (g *gateway) verifyHeaders(path string, h http.Header) {
	g.t.Helper()
	var key strings.Builder
	if f, _ := compiler.FormatFor(http.MethodPost, path); f == "anthropic_messages" {
		key.WriteString("anthropic") // x-api-key first: maybe another tenant
	}
	for _, k := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key", "X-User"} {
		key.WriteString("\x00" + h.Get(k))
	}
	// One verification per identity at a time: concurrent clients of the
	// same credential wait for it.
	g.verifyMu.Lock()
	defer g.verifyMu.Unlock()
	if g.verified[key.String()] {
		return
	}
	req, err := http.NewRequest(http.MethodPost, g.URL+path, bytes.NewReader(verifyBody))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header = h.Clone()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(verifyHeader, "1")
	resp, err := g.client.Do(req)
	if err != nil {
		// A gateway being reloaded or killed: the request that follows
		// meets the same fate, and the next one verifies again.
		g.t.Logf("verifying a credential: %v", err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	g.noteAnswered(resp)
	if resp.StatusCode != http.StatusOK {
		g.t.Logf("verifying a credential: status %d", resp.StatusCode)
		return
	}
	// A gateway whose vault is down (or past its new-tenant cap) verified
	// nothing: the next request tries again.
	for _, none := range []string{"vault_error", "no_tenant", "tenant_rate"} {
		if strings.HasPrefix(resp.Header.Get(caddymodule.HeaderName), "passthrough="+none+";") {
			return
		}
	}
	if g.verified == nil {
		g.verified = map[string]bool{}
	}
	g.verified[key.String()] = true
}

// verifyBody is the body of a verification request.
var verifyBody = []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"verify"}]}`)

// isVerification reports whether a log line is a verification request's
// (gateway.verify): not one of the test's own requests.
func isVerification(line string) bool {
	return strings.Contains(line, `"reason":"unverified_tenant"`) &&
		strings.Contains(line, fmt.Sprintf(`"raw_bytes":%d,`, len(verifyBody)))
}

// defaultCredential is sent by every request that names no credential
// header of its own: without one a candidate gets no cross-request state
// (passthrough=no_tenant). A test that wants no credential passes an empty
// one, e.g. "Authorization:".
const defaultCredential = "Bearer sk-integration-default"

func hasCredentialHeader(h http.Header) bool {
	for _, k := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key"} {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// logLines returns the token_terminator log lines written so far, but
// those of the harness's own verification requests (gateway.verify).
func (g *gateway) logLines() []string {
	g.t.Helper()
	g.settled()
	data, err := os.ReadFile(g.LogFile)
	if err != nil {
		g.t.Fatalf("reading log: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		// The handler's start-up and warm-up lines are not a request's (the
		// warm-up's may come after the first request).
		if strings.Contains(l, `"logger":"http.handlers.token_terminator"`) && !isVerification(l) &&
			!strings.Contains(l, `"msg":"token_terminator handler ready"`) && !strings.Contains(l, `"msg":"warm-up compile done"`) {
			lines = append(lines, l)
		}
	}
	return lines
}

// isCandidate reports whether the compiler treats a POST to path as a
// candidate (the single source of truth for that is compiler.FormatFor).
func isCandidate(path string) bool {
	_, ok := compiler.FormatFor(http.MethodPost, path)
	return ok
}

// expectPassthroughHeader checks the Token-Terminator header of a request
// that must have been forwarded unchanged: absent for non-candidates,
// passthrough=<reason> (or a given reason) for candidates.
func expectPassthroughHeader(t testing.TB, path string, r response, reason string) {
	t.Helper()
	if !isCandidate(path) {
		if r.TT != "" {
			t.Errorf("non-candidate %s got %s: %q", path, caddymodule.HeaderName, r.TT)
		}
		return
	}
	want := "passthrough="
	if reason != "" {
		want += reason + ";"
	}
	if !strings.HasPrefix(r.TT, want) {
		t.Errorf("%s = %q, want prefix %q", caddymodule.HeaderName, r.TT, want)
	}
}

// expectSame checks that the upstream got exactly what the client sent.
func expectSame(t testing.TB, sent []byte, got received) {
	t.Helper()
	if !bytes.Equal(sent, got.Body) {
		t.Fatalf("upstream body differs: sent %d bytes (sha %s), upstream got %d bytes (sha %s)",
			len(sent), shortSHA(sent), len(got.Body), shortSHA(got.Body))
	}
}

func shortSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// goroutineBaseline returns a function that fails t if the number of
// goroutines has not come back down to (about) the baseline within a few
// seconds: a cheap leak check that tolerates Caddy's own background work.
// Before counting it closes the upstream's connections, so that
// reverse_proxy's idle keep-alive connections (not a leak) go away.
func goroutineBaseline(t testing.TB, up *upstream) func() {
	t.Helper()
	up.CloseClientConnections()
	base := runtime.NumGoroutine()
	return func() {
		t.Helper()
		up.CloseClientConnections()
		const slack = 5
		deadline := time.Now().Add(30 * time.Second) // token workers may outlive a budget-capped count (tokens package); they must finish
		var n int
		for time.Now().Before(deadline) {
			n = runtime.NumGoroutine()
			if n <= base+slack {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines: %d, baseline %d (+%d slack); stacks:\n%s", n, base, slack, buf)
	}
}

// stopCaddy stops the running config (a later startGateway starts anew).
func stopCaddy() error { return caddy.Stop() }

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// caddyBinary returns cmd/caddy built once for the test process: the tests
// that run a real caddy process share it.
func caddyBinary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "tt-caddy-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "caddy")
		args := []string{"build", "-o", built.bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		build := exec.Command("go", append(args, "./cmd/caddy")...)
		build.Dir = "../.."
		built.out, built.err = build.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("building cmd/caddy: %v\n%s", built.err, built.out)
	}
	return built.bin
}

// waitAccounted waits until the handler has logged requests of the test's
// own requests and verifications of the credentials' verification requests
// (gateway.verify), counted from the start of the log. A request's lineage
// record, metrics, ledger record and log line are written after its
// answer is flushed to the client, so a test that reads any of them right
// after its last answer waits for them here.
func (g *gateway) waitAccounted(requests, verifications int) {
	g.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		own, verify := g.accounted()
		if own >= requests && verify >= verifications {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%d requests and %d verifications logged, want %d and %d", own, verify, requests, verifications)
		}
	}
}

// accounted counts the request log lines of the test's own requests and
// of verification requests.
func (g *gateway) accounted() (own, verify int) {
	g.t.Helper()
	data, err := os.ReadFile(g.LogFile)
	if err != nil {
		g.t.Fatalf("reading log: %v", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case !strings.Contains(l, `"logger":"http.handlers.token_terminator"`) || !strings.Contains(l, `"msg":"request"`):
		case isVerification(l):
			verify++
		default:
			own++
		}
	}
	return own, verify
}

// answeredByLog counts, per Caddy log file, the answers the harness got
// that carry the outcome header: each has one request log line.
var answeredByLog sync.Map // log file -> *atomic.Int64

// noteAnswered counts an answer of the handler (it carries the outcome
// header; a WebSocket's upgrade logs its messages instead).
func (g *gateway) noteAnswered(resp *http.Response) {
	if resp.Header.Get(caddymodule.HeaderName) == "" || resp.StatusCode == http.StatusSwitchingProtocols {
		return
	}
	c, _ := answeredByLog.LoadOrStore(g.LogFile, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

// settled waits until the log holds a request line for every answer the
// harness got through it: the log line, metrics and ledger record of a
// request are written after its answer is flushed to the client. Bounded:
// a line that never comes is left to the test's own assertions.
func (g *gateway) settled() {
	g.t.Helper()
	c, ok := answeredByLog.Load(g.LogFile)
	if !ok {
		return
	}
	want := int(c.(*atomic.Int64).Load())
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if own, verify := g.accounted(); own+verify >= want {
			return
		}
	}
}
