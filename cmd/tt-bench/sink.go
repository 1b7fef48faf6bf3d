package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sink is the loopback provider: it reads every body whole, checks that it
// is JSON, and answers as the provider of its path would, with a small
// answer that reports usage (SSE when the request asks for a stream).
type sink struct {
	srv  *http.Server
	addr string

	requests atomic.Int64
	mu       sync.Mutex
	bad      []string // what was wrong with a body (never its content)
}

// noDelayListener sets TCP_NODELAY on every accepted connection: a
// loopback provider that leaves Nagle on adds tens of milliseconds to
// small writes.
type noDelayListener struct{ net.Listener }

func (l noDelayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return c, err
}

func startSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{addr: ln.Addr().String()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(noDelayListener{ln}) }()
	return s, nil
}

func (s *sink) close() { _ = s.srv.Close() }

// sinkProcess is the sink in a process of its own (this command run with
// -sink_process), so that the direct path crosses from one process to
// another as the gateway's does: a sink in the client's process answers
// the direct request without the operating system scheduling another
// process, which made the direct path faster than a provider could be and
// the difference (what the gateway adds) larger than it is.
type sinkProcess struct {
	cmd  *exec.Cmd
	addr string
}

func startSinkProcess(ctx context.Context) (*sinkProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-sink_process")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // the sink exits when this closes (with this process)
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	_ = stdin
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("starting the sink: %v", err)
	}
	return &sinkProcess{cmd: cmd, addr: strings.TrimSpace(line)}, nil
}

func (p *sinkProcess) close() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

func (p *sinkProcess) problems() []string {
	resp, err := http.Get("http://" + p.addr + problemsPath)
	if err != nil {
		return []string{"asking the sink: " + err.Error()}
	}
	defer resp.Body.Close()
	var out []string
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return []string{"asking the sink: " + err.Error()}
	}
	return out
}

// serveSink is the sink process: it prints its address and serves until
// its standard input closes.
func serveSink() error {
	s, err := startSink()
	if err != nil {
		return err
	}
	fmt.Println(s.addr)
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.close()
	return nil
}

func (s *sink) fail(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) < 20 {
		s.bad = append(s.bad, fmt.Sprintf(format, a...))
	}
}

func (s *sink) problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bad...)
}

// bufs holds the sink's read buffers: reading a 16 MB body into a fresh
// slice each time would make the direct path pay for allocation and
// garbage collection in this process that a provider does not add.
var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// problemsPath answers the sink's problems as a JSON list of strings.
const problemsPath = "/_tt-bench/problems"

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == problemsPath {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.problems())
		return
	}
	s.requests.Add(1)
	buf := bufs.Get().(*bytes.Buffer)
	defer bufs.Put(buf)
	buf.Reset()
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := buf.ReadFrom(r.Body); err != nil {
		s.fail("%s: reading the body: %v", r.URL.Path, err)
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	body := buf.Bytes()
	if r.ContentLength >= 0 && int64(len(body)) != r.ContentLength {
		s.fail("%s: %d bytes, Content-Length %d", r.URL.Path, len(body), r.ContentLength)
	}
	// A body the gateway forwarded (reverse_proxy adds X-Forwarded-For) is
	// checked after the answer is sent, so the check adds nothing to the
	// time measured; the client's own bodies are known to be JSON.
	if r.Header.Get("X-Forwarded-For") != "" {
		defer func() {
			if !json.Valid(body) {
				s.fail("%s: the forwarded body (%d bytes) is not JSON", r.URL.Path, len(body))
			}
		}()
	}
	in := len(body) / 4 // a provider's count, roughly
	stream := bytes.Contains(body[:min(len(body), 256)], []byte(`"stream":true`))
	var out string
	switch {
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		if stream {
			out = "data: " + fmt.Sprintf(`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764633600,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"Done."},"finish_reason":null}]}`) + "\n\n" +
				"data: " + fmt.Sprintf(`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764633600,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":2,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}}`, in, in+2) + "\n\ndata: [DONE]\n\n"
		} else {
			out = fmt.Sprintf(`{"id":"chatcmpl-bench","object":"chat.completion","created":1764633600,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":2,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}}`, in, in+2)
		}
	case strings.HasSuffix(r.URL.Path, "/responses"):
		out = fmt.Sprintf(`{"id":"resp_bench","object":"response","created_at":1764633600,"status":"completed","model":"gpt-4.1","output":[{"type":"message","id":"msg_bench","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Done.","annotations":[]}]}],"usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}}`, in, in+2)
	case strings.HasSuffix(r.URL.Path, "/messages"):
		out = fmt.Sprintf(`{"id":"msg_bench","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}`, in)
	default:
		s.fail("%s: unexpected path", r.URL.Path)
		http.NotFound(w, r)
		return
	}
	if stream {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(out)))
	_, _ = io.WriteString(w, out)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// checkAnswer reports what is wrong with an answer the client got for
// path: it must be the sink's answer for that format.
func checkAnswer(path string, answer []byte) error {
	var a struct {
		ID      string          `json:"id"`
		Usage   json.RawMessage `json:"usage"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Output []struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"output"`
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return fmt.Errorf("%s: the answer (%d bytes) is not JSON: %v", path, len(answer), err)
	}
	text := ""
	switch {
	case strings.HasSuffix(path, "/chat/completions") && a.ID == "chatcmpl-bench" && len(a.Choices) == 1:
		text = a.Choices[0].Message.Content
	case strings.HasSuffix(path, "/responses") && a.ID == "resp_bench" && len(a.Output) == 1 && len(a.Output[0].Content) == 1:
		text = a.Output[0].Content[0].Text
	case strings.HasSuffix(path, "/messages") && a.ID == "msg_bench" && len(a.Content) == 1:
		text = a.Content[0].Text
	}
	if text != "Done." || len(a.Usage) == 0 {
		return fmt.Errorf("%s: not the provider's answer (%d bytes)", path, len(answer))
	}
	return nil
}
