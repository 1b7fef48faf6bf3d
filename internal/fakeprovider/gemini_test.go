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

// The fake Gemini answers as the API does: usageMetadata with the implicit
// cache's cachedContentTokenCount once a request extends an earlier one of
// the same key (header or query), JSON, SSE (alt=sse) and the JSON array of
// a stream without alt=sse.
func TestGeminiUsage(t *testing.T) {
	srv := httptest.NewServer(&Provider{})
	defer srv.Close()
	long := strings.Repeat("lorem ipsum dolor sit amet ", 1000)
	body := func(turns int) string {
		var cs []string
		for i := 0; i < turns; i++ {
			cs = append(cs, fmt.Sprintf(`{"role":"user","parts":[{"text":"question %d"}]}`, i))
		}
		return fmt.Sprintf(`{"systemInstruction":{"parts":[{"text":%q}]},"contents":[%s]}`, long, strings.Join(cs, ","))
	}
	for _, tt := range []struct {
		name, method, query string
		stream              bool
	}{
		{"json", ":generateContent", "", false},
		{"sse", ":streamGenerateContent", "?alt=sse", true},
		{"array", ":streamGenerateContent", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			send := func(turns int, key string, inQuery bool) provider.Usage {
				url := srv.URL + "/v1beta/models/gemini-2.5-pro" + tt.method + tt.query
				if inQuery {
					sep := "?"
					if tt.query != "" {
						sep = "&"
					}
					url += sep + "key=" + key
				}
				req, _ := http.NewRequest("POST", url, strings.NewReader(body(turns)))
				if !inQuery {
					req.Header.Set("x-goog-api-key", key)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, b)
				}
				if got := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"); got != tt.stream {
					t.Fatalf("content type %s", resp.Header.Get("Content-Type"))
				}
				r := response.NewReader(provider.Gemini, response.Options{Stream: tt.stream})
				r.Write(b)
				return r.Usage()
			}
			key := "k-" + tt.name
			first := send(1, key, false)
			if !first.Known || first.Input < 5000 || first.CacheRead != 0 || first.Output == 0 || first.Model != "gemini-2.5-pro" {
				t.Fatalf("first %+v", first)
			}
			second := send(2, key, true) // the same key in the query: the same cache
			if second.CacheRead < 5000 || second.Input <= second.CacheRead {
				t.Fatalf("second %+v", second)
			}
			if other := send(2, key+"-other", false); other.CacheRead != 0 {
				t.Fatalf("another key read the cache: %+v", other)
			}
		})
	}
}
