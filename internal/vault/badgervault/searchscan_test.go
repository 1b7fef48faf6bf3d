package badgervault

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// The scan answers exactly what strings.Contains of both lower-cased
// answers, invalid UTF-8 and case mappings that change a character's
// length included.
func TestSearchScanIsLowerContains(t *testing.T) {
	cases := []struct{ text, tool, q string }{
		{"Hello World", "", "world"},
		{"Hello World", "", "worlds"},
		{"", "", ""},
		{"abc", "", ""},
		{"ÄRGER", "", "ärger"},
		{"temperature 300\u212a", "", "300k"}, // KELVIN SIGN lowers to k
		{"\u0130stanbul", "", "i"},            // İ lowers to i
		{"bad \xff\xfe bytes", "", "\ufffd"},  // ToLower writes U+FFFD for a bad byte
		{"bad \xff bytes", "", "\xff"},
		{"aaaaaaaaaaaaaaaaaaaaab", "", "aaaab"},
		{"abababababc", "", "ababc"},
		{"", "Read_File", "read_f"},
		{"x", "BASH", "ash"},
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "A", "b", "B", "é", "É", "\u212a", "k", "\xff", "ß", " "}
	for range 2000 {
		var text, q strings.Builder
		for range r.IntN(40) {
			text.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		for range r.IntN(5) {
			q.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		cases = append(cases, struct{ text, tool, q string }{text.String(), "", q.String()})
	}
	for _, c := range cases {
		s, err := vault.NewSearchScan(context.Background(), c.q)
		if err != nil {
			t.Fatal(err)
		}
		lq := strings.ToLower(c.q)
		want := lq == "" || strings.Contains(strings.ToLower(c.tool), lq) || strings.Contains(strings.ToLower(c.text), lq)
		if got, err := s.Match([]byte(c.text), c.tool); got != want || err != nil {
			t.Fatalf("Match(%q, %q, query %q) = %v, %v; want %v", c.text, c.tool, c.q, got, err, want)
		}
	}
}

func FuzzSearchScan(f *testing.F) {
	f.Add("Hello World", "WORLD")
	f.Add("abababc", "ababc")
	f.Add("\xff\u212a", "k")
	f.Fuzz(func(t *testing.T, text, q string) {
		s, err := vault.NewSearchScan(context.Background(), q)
		if err != nil {
			return
		}
		lq := strings.ToLower(q)
		want := strings.Contains(strings.ToLower(text), lq)
		if got, _ := s.Match([]byte(text), ""); got != want {
			t.Fatalf("Match(%q, %q) = %v, want %v", text, q, got, want)
		}
	})
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A search costs about the same CPU whatever the query (up to its bound):
// linear in the artifact text, not in text × query. Two 400,000-character
// artifacts and a query that matches everywhere but at its last character
// (a naive scan compares the whole query at every position) cost at most a
// few times an absent two-letter query. The figures are the process's CPU
// time, the lowest of a few runs; the bound is a ratio, not a duration.
func TestSearchCostLinear(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Config{})
	for _, fill := range []string{"a", "A"} {
		a := mkArt(strings.Repeat(fill, 400_000))
		if err := s.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}); err != nil {
			t.Fatal(err)
		}
	}
	cost := func(q string) time.Duration {
		best := time.Duration(1 << 62)
		for range 3 {
			before := cpuTime(t)
			hits, err := s.Search(ctx, "t", q, 10)
			if err != nil || len(hits) != 0 {
				t.Fatalf("Search: %d hits, %v", len(hits), err)
			}
			best = min(best, cpuTime(t)-before)
		}
		return best
	}
	easy := cost("zz")
	worst := cost(strings.Repeat("a", vault.MaxSearchQueryChars-1) + "z")
	t.Logf("CPU per search: absent 2-letter query %v, worst %d-character query %v", easy, vault.MaxSearchQueryChars, worst)
	if worst > 5*easy+20*time.Millisecond {
		t.Fatalf("the worst query costs %v of CPU, more than 5× the easy one's %v (+20ms): the scan is not linear", worst, easy)
	}
}

// TestSearchWorstCPU measures (TT_MEASURE=1) the CPU time of the worst
// search the bounds allow: SearchScanBytes of artifacts read and matched
// against a query at MaxSearchQueryChars that matches everywhere but at
// its end.
func TestSearchWorstCPU(t *testing.T) {
	if testing.Short() || !measuring() {
		t.Skip("a measurement: TT_MEASURE=1")
	}
	ctx := context.Background()
	s := openTest(t, Config{MaxBytes: 1 << 30, TenantMaxBytes: 1 << 30})
	for i := range 24 {
		a := mkArt(strings.Repeat("a", 1_500_000-i))
		if err := s.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}); err != nil {
			t.Fatal(err)
		}
	}
	q := strings.Repeat("a", vault.MaxSearchQueryChars-1) + "z"
	for range 3 {
		before := cpuTime(t)
		hits, err := s.Search(ctx, "t", q, 10)
		t.Logf("worst search: %v CPU, %d hits, %v", cpuTime(t)-before, len(hits), err)
	}
}

func measuring() bool { return os.Getenv("TT_MEASURE") == "1" }
