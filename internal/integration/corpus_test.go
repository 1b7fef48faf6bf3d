package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// corpusSnippet is the gateway with its defaults (min_artifact_chars 8000,
// inline_leases 1) and context compaction off: this test is about the
// receipts of the three formats, whose rewrites must differ from the
// original only inside replaced tool-result values.
const corpusSnippet = `
	token_terminator {
		vault_dir $VAULT
		context_compaction off
	}
	reverse_proxy $UPSTREAM
`

// TestCorpusThroughCaddy sends every body of ../shared/corpus (all three
// formats; last-step files and every step of the JSONL sessions, in order)
// through a real Caddy with the module. Each file is its own tenant, so each
// starts with what amounts to a fresh vault. Every forwarded body must pass
// the compiler's validity check and differ from the original only inside
// replaced values; a pass-through must be byte-identical. It logs the
// per-file reduction table.
func TestCorpusThroughCaddy(t *testing.T) {
	files := compilertest.Corpus(t)
	up := newUpstream(t)
	g := startGateway(t, corpusSnippet, up)

	var table strings.Builder
	fmt.Fprintf(&table, "\n%-58s %-18s %4s %10s %10s %6s %8s\n", "file", "format", "reqs", "raw", "sent", "red%", "receipts")
	var totRaw, totSent, totRec int
	for fi, f := range files {
		// Both Anthropic credential styles: x-api-key for some files,
		// Authorization: Bearer for the rest (what SDK 1.x sends).
		auth := fmt.Sprintf("Authorization: Bearer sk-corpus-%d", fi)
		if f.Format == "anthropic_messages" && fi%2 == 0 {
			auth = fmt.Sprintf("x-api-key: sk-ant-corpus-%d", fi)
		}
		var raw, sent, rec int
		for si, r := range f.Requests {
			n := up.count()
			resp := g.post(r.Path, r.Body, auth, "anthropic-version: 2023-06-01")
			if resp.Status != http.StatusOK || up.count() != n+1 {
				t.Fatalf("%s step %d: status %d, upstream requests %d -> %d", f.Name, si, resp.Status, n, up.count())
			}
			got := up.last(t)
			if got.ContentLength != int64(len(got.Body)) {
				t.Fatalf("%s step %d: Content-Length %d for %d bytes", f.Name, si, got.ContentLength, len(got.Body))
			}
			receipts := checkForwarded(t, fmt.Sprintf("%s step %d", f.Name, si), r.Path, r.Body, got.Body, resp.TT)
			raw, sent, rec = raw+len(r.Body), sent+len(got.Body), rec+receipts
		}
		name := f.Name
		if len(name) > 58 {
			name = "…" + name[len(name)-57:]
		}
		fmt.Fprintf(&table, "%-58s %-18s %4d %10d %10d %5.1f%% %8d\n", name, f.Format, len(f.Requests), raw, sent, percent(raw, sent), rec)
		totRaw, totSent, totRec = totRaw+raw, totSent+sent, totRec+rec
	}
	fmt.Fprintf(&table, "%-58s %-18s %4s %10d %10d %5.1f%% %8d\n", "total", "", "", totRaw, totSent, percent(totRaw, totSent), totRec)
	t.Log(table.String())
}

var ttHeaderRE = regexp.MustCompile(`^(accepted|passthrough=[a-z_]+|shadow); raw_bytes=(-?[0-9]+); sent_bytes=(-?[0-9]+); receipts=([0-9]+)`)

// checkForwarded checks one forwarded body against what the client sent and
// the Token-Terminator header, and returns the number of receipts.
func checkForwarded(t testing.TB, what, path string, sent, got []byte, header string) int {
	t.Helper()
	m := ttHeaderRE.FindStringSubmatch(header)
	if isCandidate(path) && m == nil {
		t.Fatalf("%s: bad %s header %q", what, "Token-Terminator", header)
	}
	if !isCandidate(path) || m[1] != "accepted" {
		if !bytes.Equal(sent, got) {
			t.Fatalf("%s: pass-through (%q) changed the body", what, header)
		}
		return 0
	}
	if sb, _ := strconv.Atoi(m[3]); sb != len(got) || len(got) >= len(sent) {
		t.Fatalf("%s: header %q, forwarded %d of %d bytes", what, header, len(got), len(sent))
	}
	if err := compiler.CheckRewriteKeyed(path, sent, got); err != nil {
		t.Fatalf("%s: forwarded body fails the validity check: %v", what, err)
	}
	n := splicedReceipts(t, what, sent, got)
	if want, _ := strconv.Atoi(m[4]); n != want || n == 0 {
		t.Fatalf("%s: %d receipts in the body, header says %s", what, n, m[4])
	}
	return n
}

var receiptValueRE = regexp.MustCompile(`"?\[Token Terminator artifact a_[0-9a-f]{32} \| [^"]*?…\]"?`)

// splicedReceipts checks, with encoding/json only, that got is sent with
// some complete JSON values replaced by receipt strings, or some tool
// results' bodies replaced by receipts inside their strings (the client's
// wrapper parts around them unchanged; CheckRewrite checks exactly which),
// and every other byte unchanged; it returns the number of receipts.
func splicedReceipts(t testing.TB, what string, sent, got []byte) int {
	t.Helper()
	if !json.Valid(got) {
		t.Fatalf("%s: forwarded body is not valid JSON", what)
	}
	got = compiler.WithoutRecovery(sent, got) // recovery's additions are checked in recovery_test.go
	got = compiler.WithoutReceiptBlocks(got)  // an Anthropic receipt block list stands for its string
	loc := receiptValueRE.FindAllIndex(got, -1)
	pos, prev := 0, 0
	for i, l := range loc {
		seg := got[prev:l[0]]
		if !bytes.HasPrefix(sent[pos:], seg) {
			t.Fatalf("%s: bytes before receipt at %d changed", what, l[0])
		}
		pos += len(seg)
		prev = l[1]
		if got[l[0]] != '"' || got[l[1]-1] != '"' {
			// Inside a string: the body ends where the bytes after the
			// receipt resume.
			next := len(got)
			if i+1 < len(loc) {
				next = loc[i+1][0]
			}
			k := bytes.Index(sent[pos:], got[prev:next])
			if k < 0 {
				t.Fatalf("%s: bytes after receipt at %d changed", what, l[0])
			}
			pos += k
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(sent[pos:]))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: receipt at %d does not replace a whole JSON value: %v", what, l[0], err)
		}
		pos += int(dec.InputOffset())
	}
	if !bytes.Equal(sent[pos:], got[prev:]) {
		t.Fatalf("%s: bytes after the last receipt changed", what)
	}
	return len(loc)
}

func percent(raw, sent int) float64 {
	if raw == 0 {
		return 0
	}
	return 100 * float64(raw-sent) / float64(raw)
}

// TestNewFormatsThroughCaddy drives Responses and Anthropic conversations
// through Caddy: the first step passes through, the next carries a receipt
// for the output already delivered, a retry is byte-identical, another
// tenant starts afresh, and Anthropic works with x-api-key and with
// Authorization: Bearer alike.
func TestNewFormatsThroughCaddy(t *testing.T) {
	// Results large enough that the receipt pays for the recovery tool it
	// brings (its bytes count in the cost decision): at 9000 characters a
	// warm gpt-5 or Claude prompt is cheaper raw.
	turns := fixtures.Turns(500, 2, 20000)
	bodies := map[string][2][]byte{
		"/v1/responses": {
			fixtures.ResponsesBody("gpt-5", turns[:1], "", fixtures.ResponsesOptions{Reasoning: true}),
			fixtures.ResponsesBody("gpt-5", turns[:2], "", fixtures.ResponsesOptions{Reasoning: true}),
		},
		"/v1/messages": {
			fixtures.AnthropicBody("claude-sonnet-4-5", turns[:1], "", fixtures.AnthropicOptions{System: true, Thinking: true, CacheLast: true}),
			fixtures.AnthropicBody("claude-sonnet-4-5", turns[:2], "", fixtures.AnthropicOptions{System: true, Thinking: true, CacheLast: true}),
		},
	}
	creds := map[string][]string{
		"/v1/responses": {"Authorization: Bearer sk-openai-A", "Authorization: Bearer sk-openai-B"},
		"/v1/messages":  {"x-api-key: sk-ant-A", "Authorization: Bearer sk-ant-B"},
	}
	up := newUpstream(t)
	g := startGateway(t, corpusSnippet, up)
	for _, path := range []string{"/v1/responses", "/v1/messages"} {
		for _, cred := range creds[path] {
			b := bodies[path]
			r1 := g.post(path, b[0], cred, "anthropic-version: 2023-06-01")
			if !strings.HasPrefix(r1.TT, "passthrough=nothing_to_replace;") {
				t.Fatalf("%s %s step 1: %q", path, cred, r1.TT)
			}
			expectSame(t, b[0], up.last(t))
			r2 := g.post(path, b[1], cred, "anthropic-version: 2023-06-01")
			if !strings.HasPrefix(r2.TT, "accepted;") || !strings.Contains(r2.TT, "; receipts=1") {
				t.Fatalf("%s %s step 2: %q", path, cred, r2.TT)
			}
			got := up.last(t)
			checkForwarded(t, path+" step 2", path, b[1], got.Body, r2.TT)
			expectReceipted(t, b[1], got.Body, turns[0].Output)
			if got.Header.Get("Authorization")+got.Header.Get("X-Api-Key") == "" {
				t.Fatalf("credential header not forwarded")
			}
			// A retry compiles to identical bytes.
			g.post(path, b[1], cred, "anthropic-version: 2023-06-01")
			if again := up.last(t); !bytes.Equal(again.Body, got.Body) {
				t.Fatalf("%s %s: retry forwarded different bytes", path, cred)
			}
		}
	}
	// A third tenant never consumes the others' leases.
	r := g.post("/v1/messages", bodies["/v1/messages"][1], "x-api-key: sk-ant-C")
	if !strings.HasPrefix(r.TT, "passthrough=nothing_to_replace;") {
		t.Fatalf("tenant C: %q", r.TT)
	}
	// context_management with an edit not known to compose with the
	// rewrite passes through untouched.
	cm := append([]byte(`{"context_management":{"edits":[{"type":"compact_20260112"}]},`), bodies["/v1/messages"][1][1:]...)
	r = g.post("/v1/messages", cm, "x-api-key: sk-ant-A")
	if !strings.HasPrefix(r.TT, "passthrough=provider_context_management;") {
		t.Fatalf("context_management: %q", r.TT)
	}
	expectSame(t, cm, up.last(t))
}
