package recovery

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// The model's tool reads only what its conversation reached: an artifact
// of the same tenant outside it answers exactly as an unknown id, and a
// search (an empty one too) lists only reachable artifacts.
func TestWithin(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	k1 := "tenant:Bearer k1"
	secret := f.mem.put(t, k1, "bash", strings.Repeat("x", 100)+" PROD_DB_PASSWORD=hunter2 needle")
	arts := Within(f.mem, []artifact.Digest{f.uni.Digest, f.turn.Digest})
	exec := func(args string) string { return string(Execute(ctx, arts, k1, []byte(args))) }
	unknown := exec(`{"action":"artifact_get","artifact_id":"a_00000000000000000000000000000000"}`)
	if !strings.Contains(unknown, `"not_found"`) {
		t.Fatalf("unknown id: %s", unknown)
	}
	for _, d := range []artifact.Digest{secret.Digest, f.ascii.Digest, f.other.Digest} {
		if got := exec(`{"action":"artifact_get","artifact_id":"` + artifact.ID(d) + `"}`); got != unknown {
			t.Fatalf("an artifact outside the conversation: %s, want the unknown id's answer %s", got, unknown)
		}
	}
	// Reachable ones are served exactly as the tenant-wide tool serves them.
	for _, d := range []artifact.Digest{f.uni.Digest, f.turn.Digest} {
		args := `{"action":"artifact_get","artifact_id":"` + artifact.ID(d) + `","limit":20}`
		if got, want := exec(args), string(Execute(ctx, f.mem, k1, []byte(args))); got != want {
			t.Fatalf("reachable artifact: %s, want %s", got, want)
		}
	}
	hits := func(query string, limit int) []string {
		t.Helper()
		args, _ := json.Marshal(map[string]any{"action": "artifact_search", "query": query, "limit": limit})
		var h Hits
		if err := json.Unmarshal(Execute(ctx, arts, k1, args), &h); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range h.Results {
			ids = append(ids, r.ArtifactID)
		}
		return ids
	}
	uni, turn := artifact.ID(f.uni.Digest), artifact.ID(f.turn.Digest)
	for _, c := range []struct {
		query string
		limit int
		want  string
	}{
		{"needle", 10, uni},          // the secret and f.ascii also contain it
		{"NEEDLE", 10, uni},          // ignoring case
		{"", 10, uni + "," + turn},   // an empty query lists only the reachable
		{"", 1, uni},                 // in reachable's order, within limit
		{"PROD_DB_PASSWORD", 10, ""}, // the other conversation's content
		{"bash", 10, ""},             // tool names outside are not matched either
		{"TURN", 10, turn},           // tool name
		{"héllo wörld", 10, uni},     // non-ASCII
		{"another tenant", 10, ""},   // another tenant
	} {
		if got := strings.Join(hits(c.query, c.limit), ","); got != c.want {
			t.Fatalf("search %q limit %d = %q, want %q", c.query, c.limit, got, c.want)
		}
	}
	// A reachable digest whose artifact is gone is not found, and a
	// failing store is an error, as tenant-wide.
	gone := Within(f.mem, []artifact.Digest{artifact.DigestOf("gone", []byte(`"gone"`))})
	if got := string(Execute(ctx, gone, k1, []byte(`{"action":"artifact_search","query":""}`))); got != `{"results":[]}` {
		t.Fatalf("search over a gone artifact: %s", got)
	}
	f.mem.fail = context.DeadlineExceeded
	if got := exec(`{"action":"artifact_search","query":"needle"}`); !strings.Contains(got, `"unavailable"`) {
		t.Fatalf("failing store: %s", got)
	}
}

// FuzzExecute feeds the model's tool arguments of any shape to the tool,
// tenant-wide and within a conversation: it never panics, always answers
// one JSON object (a page, hits or an error), never serves an artifact
// outside the conversation, and a page never splits a character.
func FuzzExecute(f *testing.F) {
	for _, s := range []string{
		`{"action":"artifact_get","artifact_id":"a_00000000000000000000000000000000"}`,
		`{"action":"artifact_get","artifact_id":"ID","offset":3,"limit":5}`,
		`{"action":"artifact_get","artifact_id":"ID","offset":"2","limit":"9"}`,
		`{"action":"artifact_get","artifact_id":"OTHER"}`,
		`{"action":"artifact_search","query":"needle","limit":2}`,
		`{"action":"artifact_search","query":""}`,
		`{"action":"artifact_search","query":"PROD"}`,
		`{"action":"artifact_get","artifact_id":"ID","offset":1e3}`,
		`{"action":"artifact_get","artifact_id":"ID","offset":-1}`,
		`{"action":"artifact_get","artifact_id":"ID","limit":99999999999999999999}`,
		`{"action":"x"}`, `[]`, `null`, `"a"`, ``, `{`, `{"action":"artifact_get"}{"action":"artifact_search"}`,
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
	}
	mem := newMem()
	k1 := "tenant:k1"
	inside := mem.put(f, k1, "read_file", strings.Repeat("héllo wörld 🙂 — needle ", 30))
	outside := mem.put(f, k1, "bash", "PROD_DB_PASSWORD=hunter2 "+strings.Repeat("z", 50))
	idIn, idOut := artifact.ID(inside.Digest), artifact.ID(outside.Digest)
	scoped := Within(mem, []artifact.Digest{inside.Digest})
	f.Fuzz(func(t *testing.T, args string, sel uint8) {
		args = strings.NewReplacer(`"ID"`, `"`+idIn+`"`, `"OTHER"`, `"`+idOut+`"`).Replace(args)
		arts := Artifacts(mem)
		if sel%2 == 1 {
			arts = scoped
		}
		out := ExecuteWith(context.Background(), Config{MaxPageChars: 64, MaxSearchResults: 5}, arts, k1, []byte(args))
		var v map[string]json.RawMessage
		if err := json.Unmarshal(out, &v); err != nil || v == nil {
			t.Fatalf("answer is not one JSON object: %s", out)
		}
		_, isErr := v["error"]
		_, isPage := v["content"]
		_, isHits := v["results"]
		if !isErr && !isPage && !isHits {
			t.Fatalf("answer is neither a page, hits nor an error: %s", out)
		}
		if isPage {
			var p Page
			if err := json.Unmarshal(out, &p); err != nil || !utf8.ValidString(p.Content) || utf8.RuneCountInString(p.Content) > 64 {
				t.Fatalf("bad page: %s", out)
			}
		}
		if sel%2 == 1 && (strings.Contains(string(out), "PROD_DB_PASSWORD") || strings.Contains(string(out), idOut)) {
			t.Fatalf("the scoped tool served an artifact outside the conversation: %s", out)
		}
	})
}
