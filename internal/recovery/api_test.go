package recovery

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

func tenantFromAuth(r *http.Request) (string, bool) {
	a := r.Header.Get("Authorization")
	return "tenant:" + a, a != ""
}

type fixture struct {
	mem                     *memArtifacts
	ascii, uni, turn, other artifact.Artifact
	api                     http.Handler
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{mem: newMem()}
	var b strings.Builder
	for i := 0; b.Len() < 25000; i++ {
		b.WriteString("0123456789")
	}
	f.ascii = f.mem.put(t, "tenant:Bearer k1", "bash", b.String()+"NEEDLE")
	f.uni = f.mem.put(t, "tenant:Bearer k1", "read_file", strings.Repeat("héllo wörld 🙂 — ", 40)+"needle")
	f.turn = f.mem.put(t, "tenant:Bearer k1", "turn", `{"role":"user","content":"Question 1"},{"role":"assistant","content":"Answer <b>&</b>"}`)
	f.other = f.mem.put(t, "tenant:Bearer k2", "bash", "another tenant's needle")
	f.api = NewAPI(f.mem, tenantFromAuth, Config{})
	return f
}

func (f *fixture) get(t *testing.T, method, target, auth string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	f.api.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: content type %q", target, ct)
	}
	if rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("%s: artifacts must not be cacheable", target)
	}
	return rec.Code, rec.Body.Bytes()
}

// runes is the independent oracle for pages: characters as a rune slice.
func runes(s string, off, n int) string {
	r := []rune(s)
	return string(r[min(off, len(r)):min(off+n, len(r))])
}

func TestAPIPage(t *testing.T) {
	f := newFixture(t)
	const k1 = "Bearer k1"
	id := artifact.ID
	cases := []struct {
		name          string
		art           artifact.Artifact
		query         string
		offset, limit int // expected page
		last          bool
	}{
		{"default page", f.ascii, "", 0, 8000, false},
		{"explicit", f.ascii, "?offset=100&limit=50", 100, 50, false},
		{"limit capped at max_page_chars", f.ascii, "?offset=0&limit=999999", 0, 20000, false},
		{"tail", f.ascii, "?offset=20000&limit=20000", 20000, 20000, true},
		{"offset at the end", f.ascii, "?offset=25006", 25006, 0, true},
		{"code points, not bytes", f.uni, "?offset=3&limit=11", 3, 11, false},
		{"emoji at the edge", f.uni, "?offset=12&limit=1", 12, 1, false},
		{"folded turn", f.turn, "?limit=20000", 0, 20000, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.get(t, "GET", "/token-terminator/artifacts/"+id(c.art.Digest)+c.query, k1)
			if code != 200 {
				t.Fatalf("status %d: %s", code, body)
			}
			var p Page
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatal(err)
			}
			want := runes(c.art.Text, c.offset, c.limit)
			if p.Content != want || p.Offset != c.offset || p.TotalChars != len([]rune(c.art.Text)) ||
				p.ArtifactID != id(c.art.Digest) || p.SHA256 != hexSHA256(c.art.Text) || p.ToolName != c.art.Tool {
				t.Fatalf("page %+v", p)
			}
			if c.last != (p.NextOffset == nil) || (!c.last && *p.NextOffset != c.offset+c.limit) {
				t.Fatalf("next_offset %v", p.NextOffset)
			}
			if !strings.Contains(string(body), `"next_offset":`) {
				t.Fatalf("next_offset must always be present (null at the end): %s", body)
			}
		})
	}
	// Content is returned as stored, without HTML escaping.
	_, body := f.get(t, "GET", "/token-terminator/artifacts/"+id(f.turn.Digest), k1)
	if !strings.Contains(string(body), `Answer <b>&</b>`) {
		t.Fatalf("content escaped: %s", body)
	}
}

// TestAPIPagesReassemble: following next_offset page by page yields the
// exact artifact, whose sha256 is the one reported.
func TestAPIPagesReassemble(t *testing.T) {
	f := newFixture(t)
	for _, a := range []artifact.Artifact{f.ascii, f.uni, f.turn} {
		for _, limit := range []int{1, 7, 8000, 20000} {
			var got strings.Builder
			next := 0
			for pages := 0; ; pages++ {
				_, body := f.get(t, "GET", "/token-terminator/artifacts/"+artifact.ID(a.Digest)+"?offset="+itoa(next)+"&limit="+itoa(limit), "Bearer k1")
				var p Page
				if err := json.Unmarshal(body, &p); err != nil || pages > 30000 {
					t.Fatalf("page %d: %v %s", pages, err, body)
				}
				got.WriteString(p.Content)
				if p.NextOffset == nil {
					break
				}
				next = *p.NextOffset
			}
			if got.String() != a.Text || artifact.DigestOf(got.String(), a.Raw) != a.Digest {
				t.Fatalf("limit %d: pages do not reassemble the artifact", limit)
			}
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestAPIErrors(t *testing.T) {
	f := newFixture(t)
	id := artifact.ID(f.ascii.Digest)
	_, notFound := f.get(t, "GET", "/token-terminator/artifacts/a_00000000000000000000000000000000", "Bearer k1")
	cases := []struct {
		name, method, target, auth string
		status                     int
		errType                    string
	}{
		{"unknown id", "GET", "/token-terminator/artifacts/a_00000000000000000000000000000000", "Bearer k1", 404, "not_found"},
		{"another tenant's id", "GET", "/token-terminator/artifacts/" + artifact.ID(f.other.Digest), "Bearer k1", 404, "not_found"},
		{"malformed id", "GET", "/token-terminator/artifacts/../../etc", "Bearer k1", 404, "not_found"},
		{"upper-case id", "GET", "/token-terminator/artifacts/" + strings.ToUpper(id), "Bearer k1", 404, "not_found"},
		{"negative offset", "GET", "/token-terminator/artifacts/" + id + "?offset=-1", "Bearer k1", 400, "invalid_request"},
		{"offset not a number", "GET", "/token-terminator/artifacts/" + id + "?offset=abc", "Bearer k1", 400, "invalid_request"},
		{"offset past the end", "GET", "/token-terminator/artifacts/" + id + "?offset=25007", "Bearer k1", 400, "invalid_request"},
		{"zero limit", "GET", "/token-terminator/artifacts/" + id + "?limit=0", "Bearer k1", 400, "invalid_request"},
		{"fractional limit", "GET", "/token-terminator/artifacts/" + id + "?limit=1.5", "Bearer k1", 400, "invalid_request"},
		{"bad search limit", "GET", "/token-terminator/artifacts?q=x&limit=-3", "Bearer k1", 400, "invalid_request"},
		{"method", "POST", "/token-terminator/artifacts/" + id, "Bearer k1", 405, "method_not_allowed"},
		{"no credential", "GET", "/token-terminator/artifacts/" + id, "", 401, "unauthorized"},
		{"unknown endpoint", "GET", "/token-terminator/artifactsx", "Bearer k1", 404, "not_found"},
		{"nested path", "GET", "/token-terminator/artifacts/" + id + "/x", "Bearer k1", 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.get(t, c.method, c.target, c.auth)
			var e struct{ Error Error }
			if err := json.Unmarshal(body, &e); err != nil || code != c.status || e.Error.Type != c.errType || e.Error.Message == "" {
				t.Fatalf("status %d body %s", code, body)
			}
			if c.status == 404 && strings.Contains(c.name, "id") && !slices.Equal(body, notFound) {
				t.Fatalf("every missing id must get the same body: %s vs %s", body, notFound)
			}
		})
	}
	f.mem.fail = errors.New("disk on fire at /var/lib/secret")
	code, body := f.get(t, "GET", "/token-terminator/artifacts/"+id, "Bearer k1")
	if code != 503 || strings.Contains(string(body), "secret") {
		t.Fatalf("store failure: %d %s", code, body)
	}
}

func TestAPISearch(t *testing.T) {
	f := newFixture(t)
	hit := func(a artifact.Artifact) Hit {
		return Hit{ArtifactID: artifact.ID(a.Digest), ToolName: a.Tool, TotalChars: a.Chars}
	}
	cases := []struct {
		query string
		want  []Hit
	}{
		{"?q=needle", []Hit{hit(f.uni), hit(f.ascii)}},
		{"?q=NEEDLE&limit=1", []Hit{hit(f.uni)}},
		{"?q=turn", []Hit{hit(f.turn)}},
		{"?q=nothing-like-this", []Hit{}},
		{"", []Hit{hit(f.turn), hit(f.uni), hit(f.ascii)}},
	}
	for _, c := range cases {
		code, body := f.get(t, "GET", "/token-terminator/artifacts"+c.query, "Bearer k1")
		var h Hits
		if err := json.Unmarshal(body, &h); err != nil || code != 200 {
			t.Fatalf("%s: %d %s", c.query, code, body)
		}
		if !reflect.DeepEqual(h.Results, c.want) {
			t.Fatalf("%s: %+v, want %+v", c.query, h.Results, c.want)
		}
		if strings.Contains(string(body), "content") || strings.Contains(string(body), "0123456789") {
			t.Fatalf("a listing carries no content: %s", body)
		}
	}
	// The cap applies whatever the caller asks.
	api := NewAPI(f.mem, tenantFromAuth, Config{MaxSearchResults: 2, Path: "/tt/"})
	req := httptest.NewRequest("GET", "/tt/artifacts?limit=50", nil)
	req.Header.Set("Authorization", "Bearer k1")
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	var h Hits
	if json.Unmarshal(rec.Body.Bytes(), &h); len(h.Results) != 2 {
		t.Fatalf("max_search_results not applied: %s", rec.Body.Bytes())
	}
}

func hexSHA256(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// TestAPIFoldedTurnIsJSON: a folded turn, stored as the span of its
// messages (as the compiler files it, and as vaults written before hold
// it), recovers as the JSON array of those messages, each element's bytes
// as sent; total_chars and sha256 (page and search hit) describe that
// text. A tool that happens to be named turn recovers as stored.
func TestAPIFoldedTurnIsJSON(t *testing.T) {
	f := newFixture(t)
	span := "{\"role\":\"user\",\"content\":\"Question 1 \\u00e9\"},\n  {\"role\":\"assistant\",\"content\":\"Answer <b>&</b>\"}"
	fold := artifact.Artifact{Digest: artifact.DigestOf(span, []byte(span)), Text: span, Raw: []byte(span), Tool: "turn", Chars: len([]rune(span))}
	if err := f.mem.store.Persist(t.Context(), artifact.Scope{Tenant: "tenant:Bearer k1"}, []artifact.Artifact{fold}); err != nil {
		t.Fatal(err)
	}
	_, body := f.get(t, "GET", "/token-terminator/artifacts/"+artifact.ID(fold.Digest)+"?limit=20000", "Bearer k1")
	var p Page
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal([]byte(p.Content), &msgs); err != nil {
		t.Fatalf("content is not JSON: %v\n%s", err, p.Content)
	}
	if len(msgs) != 2 || string(msgs[0]) != `{"role":"user","content":"Question 1 \u00e9"}` || string(msgs[1]) != `{"role":"assistant","content":"Answer <b>&</b>"}` {
		t.Fatalf("messages %q", msgs)
	}
	if p.Content != "["+span+"]" || p.TotalChars != len([]rune(p.Content)) || p.SHA256 != hexSHA256(p.Content) {
		t.Fatalf("page %+v", p)
	}
	_, body = f.get(t, "GET", "/token-terminator/artifacts?q=Question+1", "Bearer k1")
	var h Hits
	if err := json.Unmarshal(body, &h); err != nil || len(h.Results) == 0 {
		t.Fatalf("search: %v %s", err, body)
	}
	for _, r := range h.Results {
		if r.ArtifactID == artifact.ID(fold.Digest) && r.TotalChars != p.TotalChars {
			t.Fatalf("search hit total_chars %d, page %d", r.TotalChars, p.TotalChars)
		}
	}
	// A tool result of a tool named "turn" is no folded turn.
	_, body = f.get(t, "GET", "/token-terminator/artifacts/"+artifact.ID(f.turn.Digest)+"?limit=20000", "Bearer k1")
	if err := json.Unmarshal(body, &p); err != nil || p.Content != f.turn.Text {
		t.Fatalf("a turn tool's result changed: %v %q", err, p.Content)
	}
}
