package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// persistGet: Persist makes artifacts readable exactly (Text, Raw, Chars and
// provenance), twice is the same as once, and an absent digest is not found.
func (s suite) persistGet(t *testing.T) {
	st := s.open(t, Config{})
	esc := art("é")
	esc.Raw = []byte(`"\u00e9"`) // a spelling of its own: kept byte for byte
	esc.Digest = artifact.DigestOf(esc.Text, esc.Raw)
	arts := []artifact.Artifact{
		art("small"),
		art(text("big", 100_000)),
		art("unicode: héllo wörld ✓ 😀 \u2028 \"quoted\" \\ back\tslash\n"),
		art(strings.Repeat("x", 1023)),
		{Digest: art("").Digest, Raw: []byte(`""`)}, // empty text, no provenance
		esc,
	}
	persist(t, st, "t", arts...)
	persist(t, st, "t", arts...) // already stored: verified, not an error
	for _, a := range arts {
		if !has(t, st, "t", a) {
			t.Fatalf("artifact %x not found after Persist", a.Digest[:4])
		}
	}
	if _, ok, err := st.Get(context.Background(), "t", art("absent").Digest); ok || err != nil {
		t.Fatalf("absent artifact: ok=%v err=%v", ok, err)
	}
	if err := st.Persist(context.Background(), artifact.Scope{Tenant: "t"}, nil); err != nil {
		t.Fatalf("empty persist: %v", err)
	}
}

// digestMismatch: content filed under a digest that is not its identity
// (artifact.DigestOf of Text and Raw) is refused and not stored: other
// content's digest, the text-only digest, and the identity of another raw
// spelling of the same text.
func (s suite) digestMismatch(t *testing.T) {
	st := s.open(t, Config{})
	good := art(text("bad", 2000))
	other := good
	other.Raw = []byte(strings.Replace(string(good.Raw), "bad", `\u0062ad`, 1))
	for _, d := range []artifact.Digest{
		art("something else").Digest,
		sha256.Sum256([]byte(good.Text)),
		artifact.DigestOf(other.Text, other.Raw),
	} {
		bad := good
		bad.Digest = d
		if err := st.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{bad}); err == nil {
			t.Fatalf("persist under digest %x succeeded", d[:4])
		}
		if _, ok, _ := st.Get(context.Background(), "t", bad.Digest); ok {
			t.Fatalf("artifact stored under digest %x", d[:4])
		}
	}
}

// spellingsApart: distinct raw spellings of one text (escapes, a text
// part list against a string, lone surrogates that decode alike) are
// distinct artifacts, and each restores its own bytes: Get's Raw is
// exactly what was persisted under that digest, whichever came first.
func (s suite) spellingsApart(t *testing.T) {
	st := s.open(t, Config{})
	ctx := context.Background()
	body := text("spelled", 9000)
	plain := art(body)
	spelled := func(a artifact.Artifact, text string, raw string) artifact.Artifact {
		a.Text, a.Raw = text, []byte(raw)
		a.Digest = artifact.DigestOf(a.Text, a.Raw)
		return a
	}
	arts := []artifact.Artifact{
		plain,
		spelled(plain, body, strings.Replace(string(plain.Raw), "s", `\u0073`, 1)),
		spelled(plain, body, `[{"type":"text","text":`+string(plain.Raw)+`}]`),
		spelled(plain, body, `[{"type":"text","text":`+string(plain.Raw[:10])+`"},{"type":"text","text":"`+string(plain.Raw[10:])+`}]`),
		spelled(plain, "\uFFFD", `"\ud800"`),
		spelled(plain, "\uFFFD", `"\udbff"`),
	}
	seen := map[artifact.Digest]bool{}
	for _, a := range arts {
		if seen[a.Digest] {
			t.Fatalf("two spellings share digest %x", a.Digest[:4])
		}
		seen[a.Digest] = true
		persist(t, st, "t", a) // one at a time: an earlier spelling must not answer for a later one
	}
	for i, a := range arts {
		got, ok, err := st.Get(ctx, "t", a.Digest)
		if err != nil || !ok || got.Text != a.Text || !bytes.Equal(got.Raw, a.Raw) {
			t.Fatalf("spelling %d: Get = %v, %v; raw %.40q, want %.40q", i, ok, err, got.Raw, a.Raw)
		}
	}
	missing, err := st.Missing(ctx, artifact.Scope{Tenant: "t"}, []artifact.Digest{arts[1].Digest, artifact.DigestOf(body, []byte(`"x"`))})
	if err != nil || len(missing) != 1 || missing[0] == arts[1].Digest {
		t.Fatalf("missing = %x, %v", missing, err)
	}
}

// missing returns exactly the digests not stored, in the order asked.
func (s suite) missing(t *testing.T) {
	st := s.open(t, Config{})
	ctx := context.Background()
	a, b, c, d := art(text("a", 3000)), art(text("b", 3000)), art(text("c", 3000)), art(text("d", 3000))
	persist(t, st, "t", a, b)
	got, err := st.Missing(ctx, artifact.Scope{Tenant: "t"}, digests(a, c, b, d))
	if err != nil {
		t.Fatal(err)
	}
	if want := digests(c, d); !slices.Equal(got, want) {
		t.Fatalf("missing %d digests, want c, d", len(got))
	}
	if got, err := st.Missing(ctx, artifact.Scope{Tenant: "t"}, nil); len(got) != 0 || err != nil {
		t.Fatalf("missing of nothing: %v %v", got, err)
	}
	// Session does not scope artifacts.
	if got, err := st.Missing(ctx, artifact.Scope{Tenant: "t", Session: "s2"}, digests(a)); len(got) != 0 || err != nil {
		t.Fatalf("artifact scoped by session: %v %v", got, err)
	}
}

// tenantsApart: one tenant's artifacts and lineage are invisible to another,
// and lineage is also private to its session.
func (s suite) tenantsApart(t *testing.T) {
	st := s.open(t, Config{})
	ctx := context.Background()
	a := art(text("shared", 5000))
	persist(t, st, "tenant-x", a)
	if got, err := st.Missing(ctx, artifact.Scope{Tenant: "tenant-y"}, digests(a)); err != nil || len(got) != 1 {
		t.Fatalf("tenant-y sees tenant-x's artifact: missing=%d err=%v", len(got), err)
	}
	if has(t, st, "tenant-y", a) {
		t.Fatal("tenant-y can read tenant-x's artifact")
	}
	// Tenant strings that share a prefix or look like key separators stay apart.
	for _, other := range []string{"tenant-x/", "tenant-", "tenant-x\x00", "{tenant-x}", ""} {
		if has(t, st, other, a) {
			t.Fatalf("tenant %q can read tenant-x's artifact", other)
		}
	}

	ch := chain("conv", 4)
	x := artifact.Scope{Tenant: "tenant-x", Session: "s1"}
	if err := st.Record(ctx, x, artifact.Record{ChainEnd: ch[1], Length: 2, Exposures: map[artifact.Digest]int{a.Digest: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []artifact.Scope{{Tenant: "tenant-y", Session: "s1"}, {Tenant: "tenant-x"}, {Tenant: "tenant-x", Session: "s2"}, {Tenant: "tenant-xs1"}} {
		lin, err := st.Ancestor(ctx, sc, ch)
		if err != nil || lin.Found {
			t.Fatalf("scope %+v sees lineage of %+v: found=%v err=%v", sc, x, lin.Found, err)
		}
	}
	if lin, err := st.Ancestor(ctx, x, ch); err != nil || !lin.Found {
		t.Fatalf("own lineage not found: %v", err)
	}
}

// concurrentPersist: many callers persisting the same artifacts at once all
// succeed and the stored artifact is exact.
func (s suite) concurrentPersist(t *testing.T) {
	st := s.open(t, Config{})
	arts := []artifact.Artifact{art(text("p1", 40_000)), art(text("p2", 40_000))}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := slices.Clone(arts)
			if i%2 == 1 {
				slices.Reverse(mine)
			}
			errs <- st.Persist(context.Background(), artifact.Scope{Tenant: "t"}, mine)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent persist: %v", err)
		}
	}
	for _, a := range arts {
		if !has(t, st, "t", a) {
			t.Fatal("artifact lost")
		}
	}
}

// closed: every operation after Close fails; Close twice is fine.
func (s suite) closed(t *testing.T) {
	st := s.open(t, Config{})
	ctx := context.Background()
	a := art(text("c", 2000))
	sc := artifact.Scope{Tenant: "t"}
	persist(t, st, "t", a)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := st.Persist(ctx, sc, []artifact.Artifact{art(text("d", 2000))}); err == nil {
		t.Error("Persist after Close succeeded")
	}
	if _, err := st.Missing(ctx, sc, digests(a)); err == nil {
		t.Error("Missing after Close succeeded")
	}
	if _, err := st.Ancestor(ctx, sc, chain("x", 3)); err == nil {
		t.Error("Ancestor after Close succeeded")
	}
	if err := st.Record(ctx, sc, artifact.Record{ChainEnd: chain("x", 1)[0], Length: 1}); err == nil {
		t.Error("Record after Close succeeded")
	}
	if _, _, err := st.Get(ctx, "t", a.Digest); err == nil {
		t.Error("Get after Close succeeded")
	}
	if _, err := st.TenantKey(ctx); err == nil {
		t.Error("TenantKey after Close succeeded")
	}
}

// tenantKey is 32 bytes, random, and the same on every call.
func (s suite) tenantKey(t *testing.T) {
	st := s.open(t, Config{})
	k1, err := st.TenantKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k2, err := st.TenantKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != 32 || !bytes.Equal(k1, k2) || bytes.Equal(k1, make([]byte, 32)) {
		t.Fatalf("tenant key %d bytes, stable=%v", len(k1), bytes.Equal(k1, k2))
	}
}

// reopen: artifacts, lineage and the tenant key survive Close and Open.
func (s suite) reopen(t *testing.T) {
	ctx := context.Background()
	st := s.open(t, Config{})
	a := art(text("durable", 30_000))
	persist(t, st, "t", a)
	ch := chain("reopen", 3)
	sc := artifact.Scope{Tenant: "t", Session: "s"}
	exp := map[artifact.Digest]int{a.Digest: 2}
	if err := st.Record(ctx, sc, artifact.Record{ChainEnd: ch[1], Length: 2, Exposures: exp}); err != nil {
		t.Fatal(err)
	}
	key, err := st.TenantKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = s.open(t, Config{})
	if !has(t, st, "t", a) {
		t.Fatal("artifact lost across reopen")
	}
	lin, err := st.Ancestor(ctx, sc, ch)
	if err != nil || !lin.Found || lin.Ancestor != ch[1] || lin.Exposures[a.Digest] != 2 {
		t.Fatalf("lineage lost across reopen: %+v %v", lin, err)
	}
	key2, err := st.TenantKey(ctx)
	if err != nil || !bytes.Equal(key, key2) {
		t.Fatalf("tenant key changed across reopen: %v", err)
	}
}
