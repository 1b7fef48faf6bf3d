//go:build unix

package redisvault

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// Logs and errors name sizes and digest prefixes, never content, tool
// arguments or the URL's password, through writes, quota eviction, full
// vaults, corruption and outages.
func TestNoContentInLogsOrErrors(t *testing.T) {
	srv := startServer(t)
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", "hunter2").Err(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	secret := func(i int) artifact.Artifact {
		a := testArt(i, 20000)
		a.Text = fmt.Sprintf("SECRET-TEXT-%d ", i) + a.Text
		a.Digest = sha(a.Text)
		a.Raw = []byte(fmt.Sprintf("%q", a.Text))
		a.Args = `{"token":"SECRET-ARG"}`
		return a
	}
	one := secret(0)
	size := int64(len(one.Text) + len(one.Raw))
	clk := &struct{ t time.Time }{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := srv.open(t, Config{URL: fmt.Sprintf("redis://:hunter2@127.0.0.1:%d/0", srv.Port), Logger: zap.New(core),
		MaxBytes: 4 * size, TenantMaxBytes: 2*size + size/2, Retention: time.Hour, OpTimeout: opTimeout,
		Now: func() time.Time { return clk.t }})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	var errs []error
	for i := range 4 { // the third is over quota (ErrFull), the fourth evicts the first
		if i == 3 {
			clk.t = clk.t.Add(2 * time.Hour)
		}
		errs = append(errs, st.Persist(ctx, sc, []artifact.Artifact{secret(i)}))
	}
	bad := secret(9)
	bad.Digest = sha("other")
	errs = append(errs, st.Persist(ctx, sc, []artifact.Artifact{bad}))
	// Corrupt a stored record: Get must fail without quoting it.
	admin := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", srv.Port), Password: "hunter2"})
	defer admin.Close()
	if err := admin.Set(ctx, st.k.tenant("t").artifact(hexOf(secret(3).Digest)), "SECRET-TEXT-corrupt", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err := st.Get(ctx, "t", secret(3).Digest)
	errs = append(errs, err)
	srv.Kill()
	errs = append(errs, st.Persist(ctx, sc, []artifact.Artifact{secret(5)}))
	st.rdb.Close()
	st2, err := Open(ctx, Config{URL: fmt.Sprintf("redis://:hunter2@127.0.0.1:%d/0", srv.Port), Logger: zap.New(core), OpTimeout: opTimeout})
	if err != nil {
		t.Fatal(err)
	}
	st2.Close()

	var text []string
	for _, err := range errs {
		if err != nil {
			text = append(text, err.Error())
		}
	}
	if len(text) < 4 {
		t.Fatalf("expected quota, digest, corruption and outage errors, got %q", text)
	}
	for _, e := range logs.All() {
		text = append(text, e.Message, fmt.Sprint(e.ContextMap()))
	}
	if logs.Len() == 0 {
		t.Fatal("nothing was logged: the test proves nothing")
	}
	t.Logf("checked %d errors and log lines", len(text))
	for _, s := range text {
		for _, bad := range []string{"SECRET", "hunter2"} {
			if strings.Contains(s, bad) {
				t.Fatalf("%q leaks %s", s, bad)
			}
		}
	}
}
