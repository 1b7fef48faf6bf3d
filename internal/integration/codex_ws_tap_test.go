package integration

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// wsTap is a transparent TCP relay in front of the gateway that keeps what
// crossed it: every byte the client received, and the text messages of
// the WebSocket frames each way (sockets without an extension, as the
// gateway negotiates none). The bytes are relayed as they come; reading
// them for the record never holds the relay.
type wsTap struct {
	URL string

	mu       sync.Mutex
	received bytes.Buffer // everything the client read, raw
	sent     [][]byte     // the client's text messages
	got      [][]byte     // the text messages the client was sent
}

func newWSTap(t *testing.T, target string) *wsTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tp := &wsTap{URL: "http://" + ln.Addr().String()}
	addr := strings.TrimPrefix(target, "http://")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go tp.relay(c, addr)
		}
	}()
	return tp
}

// relay copies one client connection to the target and back.
func (tp *wsTap) relay(client net.Conn, addr string) {
	defer client.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, toClient bool) {
		pr, pw := io.Pipe()
		go tp.read(pr, toClient)
		_, _ = io.Copy(io.MultiWriter(dst, tp.rawWriter(toClient), pw), src)
		pw.Close()
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, client, false)
	go pipe(client, up, true)
	<-done
	<-done
}

// rawWriter keeps the bytes the client reads.
func (tp *wsTap) rawWriter(toClient bool) io.Writer {
	if !toClient {
		return io.Discard
	}
	return writerFunc(func(p []byte) (int, error) {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		return tp.received.Write(p)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// read parses one direction: an HTTP head, then, after an upgrade, the
// frames; anything else is only drained.
func (tp *wsTap) read(r *io.PipeReader, toClient bool) {
	defer io.Copy(io.Discard, r)
	br := bufio.NewReader(r)
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	h := strings.ToLower(head.String())
	if toClient && !strings.HasPrefix(h, "http/1.1 101") || !toClient && !strings.Contains(h, "upgrade: websocket") {
		return
	}
	var msg []byte
	var op byte
	for {
		fh, payload, err := fakeprovider.ReadFrame(br)
		if err != nil {
			return
		}
		switch fh.Op {
		case wsrelay.OpText, wsrelay.OpBinary:
			op, msg = fh.Op, append([]byte(nil), payload...)
		case wsrelay.OpContinuation:
			msg = append(msg, payload...)
		default:
			continue
		}
		if !fh.Fin || op != wsrelay.OpText {
			continue
		}
		tp.mu.Lock()
		if toClient {
			tp.got = append(tp.got, msg)
		} else {
			tp.sent = append(tp.sent, msg)
		}
		tp.mu.Unlock()
	}
}

// clientSent returns the client's text messages, in order.
func (tp *wsTap) clientSent() [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([][]byte(nil), tp.sent...)
}

// clientGot returns the text messages the client was sent, in order.
func (tp *wsTap) clientGot() [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([][]byte(nil), tp.got...)
}

// clientRead returns every byte the client read.
func (tp *wsTap) clientRead() []byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return bytes.Clone(tp.received.Bytes())
}
