package fakeprovider

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// TestUsageLikeTheProviders reads the fake's answers with the gateway's own
// response reader: every format, JSON and SSE, reports usage, and a request
// that extends the previous one of its session reads the shared prefix from
// the simulated cache (Anthropic only at a cache_control breakpoint, as the
// real API does), while another credential's cache stays cold.
func TestUsageLikeTheProviders(t *testing.T) {
	srv := httptest.NewServer(&Provider{})
	defer srv.Close()
	long := strings.Repeat("lorem ipsum dolor sit amet ", 1000) // about 6,700 tokens
	bodies := map[string]func(stream bool, turns int, marker bool) string{
		"/v1/chat/completions": func(stream bool, turns int, _ bool) string {
			msgs := []string{fmt.Sprintf(`{"role":"system","content":%q}`, long)}
			for i := 0; i < turns; i++ {
				msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"question %d"}`, i))
			}
			return fmt.Sprintf(`{"model":"gpt-4o","stream":%t,"stream_options":{"include_usage":true},"messages":[%s]}`, stream, strings.Join(msgs, ","))
		},
		"/v1/responses": func(stream bool, turns int, _ bool) string {
			var items []string
			for i := 0; i < turns; i++ {
				items = append(items, fmt.Sprintf(`{"role":"user","content":"question %d"}`, i))
			}
			return fmt.Sprintf(`{"model":"gpt-5","stream":%t,"instructions":%q,"input":[%s]}`, stream, long, strings.Join(items, ","))
		},
		"/v1/messages": func(stream bool, turns int, marker bool) string {
			cc := ""
			if marker {
				cc = `,"cache_control":{"type":"ephemeral"}`
			}
			var msgs []string
			for i := 0; i < turns; i++ {
				msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"question %d"}`, i))
			}
			return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":10,"stream":%t,"system":[{"type":"text","text":%q%s}],"messages":[%s]}`, stream, long, cc, strings.Join(msgs, ","))
		},
	}
	formats := map[string]provider.Format{"/v1/chat/completions": provider.Chat, "/v1/responses": provider.Responses, "/v1/messages": provider.Anthropic}
	for path, body := range bodies {
		for _, stream := range []bool{false, true} {
			for _, marker := range []bool{true, false} {
				if path != "/v1/messages" && !marker {
					continue
				}
				name := fmt.Sprintf("%s stream=%t breakpoint=%t", path, stream, marker)
				key := fmt.Sprintf("sk-%s-%t-%t", path, stream, marker)
				send := func(turns int, key string) provider.Usage {
					req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body(stream, turns, marker)))
					req.Header.Set("Authorization", "Bearer "+key)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Fatalf("%s: status %d", name, resp.StatusCode)
					}
					rd := response.NewReader(formats[path], response.Options{Stream: stream})
					io.Copy(rd, resp.Body)
					u := rd.Usage()
					if !u.Known || u.Input == 0 || u.Output == 0 {
						t.Fatalf("%s: usage not reported: %+v", name, u)
					}
					return u
				}
				first, second, other := send(1, key), send(2, key), send(2, key+"-other")
				if first.CacheRead != 0 || other.CacheRead != 0 {
					t.Errorf("%s: a cold cache read %d / %d tokens", name, first.CacheRead, other.CacheRead)
				}
				if wantRead := marker; (second.CacheRead > 0) != wantRead {
					t.Errorf("%s: the second request read %d tokens from the cache, want reads %t", name, second.CacheRead, wantRead)
				}
				if marker && path == "/v1/messages" && first.CacheWrite == 0 {
					t.Errorf("%s: an Anthropic breakpoint wrote nothing to the cache", name)
				}
			}
		}
	}
}
