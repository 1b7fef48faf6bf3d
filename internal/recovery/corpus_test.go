package recovery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery/recoverytest"
)

var receiptID = regexp.MustCompile(`\[Token Terminator (?:artifact|folded turn) (a_[0-9a-f]{32})`)

// TestCorpusRecovery compiles every real request of the shared corpus (the
// last step of each session) with compaction on, then recovers every
// receipt and folded turn through the tool, page by page: the content must
// be exactly what was removed (its sha256 is the artifact's, and the JSON
// value it replaced is in the original request). The tool is then appended
// and a follow-up built; the provider rules must still hold.
func TestCorpusRecovery(t *testing.T) {
	ctx := context.Background()
	for _, f := range compilertest.Corpus(t) {
		if f.Format == "mixed" {
			continue
		}
		req := f.Requests[len(f.Requests)-1]
		t.Run(f.Name, func(t *testing.T) {
			mem := newMem()
			c, err := compiler.New(compiler.Options{InlineLeases: 1, Compaction: compiler.Compaction{
				Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 6, InlineRecentTurns: 5}}, mem.store, nil)
			if err != nil {
				t.Fatal(err)
			}
			res := c.Compile(ctx, compiler.Request{Path: req.Path, Body: req.Body, Scope: artifact.Scope{Tenant: loopTenant}, Mode: compiler.ModeEnforce})
			ids := receiptID.FindAllSubmatch(res.Body, -1)
			if res.Decision == compiler.Accepted && len(ids) == 0 {
				t.Fatal("accepted without a receipt")
			}
			for _, m := range ids {
				id := string(m[1])
				var content bytes.Buffer
				var digest string
				for next := 0; ; {
					args, _ := json.Marshal(map[string]any{"action": "artifact_get", "artifact_id": id, "offset": next, "limit": 20000})
					var p Page
					if err := json.Unmarshal(Execute(ctx, mem, loopTenant, args), &p); err != nil || p.ArtifactID != id {
						t.Fatalf("%s: %v %+v", id, err, p)
					}
					content.WriteString(p.Content)
					digest = p.SHA256
					if p.NextOffset == nil {
						break
					}
					next = *p.NextOffset
				}
				sum := sha256.Sum256(content.Bytes())
				d, _, _ := mem.Resolve(context.Background(), loopTenant, id)
				a, _, _ := mem.store.Get(context.Background(), loopTenant, d)
				if artifact.DigestOf(a.Text, a.Raw) != d || content.String() != Content(a) || digest != hex.EncodeToString(sum[:]) {
					t.Fatalf("%s: recovered content is not the artifact", id)
				}
				if bytes.Contains(res.Body, []byte(artifact.FoldPrefix+id)) {
					// A folded turn: the JSON array of its messages as sent.
					if want := "[" + string(a.Raw) + "]"; content.String() != want || !json.Valid(content.Bytes()) {
						t.Fatalf("%s: a folded turn recovers as %.80q…, not the JSON array of its messages", id, content.String())
					}
				}
				if !bytes.Contains(req.Body, a.Raw) {
					t.Fatalf("%s: the replaced value is not in the original request", id)
				}
			}
			body, err := AppendTool(provider.Format(f.Format), res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !insertedOnly(res.Body, body) {
				t.Fatal("AppendTool changed bytes outside the tools array")
			}
			follow, err := FollowUp(provider.Format(f.Format), body, []byte(answers[provider.Format(f.Format)](true, "")), []Call{{ID: "own1", Result: []byte(`{"content":"x"}`)}})
			if err != nil {
				t.Fatal(err)
			}
			if !insertedOnly(body, follow) {
				t.Fatal("FollowUp changed bytes of the request")
			}
			if err := recoverytest.CheckRequest(provider.Format(f.Format), follow); err != nil {
				t.Fatalf("follow-up breaks a provider rule: %v", err)
			}
			t.Logf("%d receipts and folded turns recovered exactly", len(ids))
		})
	}
}
