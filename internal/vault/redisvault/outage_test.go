//go:build unix

package redisvault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

const opTimeout = 300 * time.Millisecond

// bound is how long a failing call may take: its op timeout plus scheduling
// slack on a loaded machine (-race, a dozen runnable processes per core). A
// call that hangs on a stalled server never returns; one waiting on TCP
// takes minutes.
const bound = opTimeout + 1700*time.Millisecond

func testArt(seed, n int) artifact.Artifact {
	text := fixtures.ToolOutput(seed, n)
	raw := []byte(fmt.Sprintf("%q", text))
	return artifact.Artifact{Digest: artifact.DigestOf(text, raw), Text: text, Raw: raw, Tool: "bash", Chars: len([]rune(text))}
}

// calls runs every Store call once and returns the errors, each checked to
// return within bound.
func calls(t *testing.T, st *Store, seed int) []error {
	t.Helper()
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	a := testArt(seed, 9000)
	ops := []func() error{
		func() error { return st.Persist(ctx, sc, []artifact.Artifact{a}) },
		func() error { _, err := st.Missing(ctx, sc, []artifact.Digest{a.Digest}); return err },
		func() error {
			_, err := st.Ancestor(ctx, sc, []artifact.Digest{a.Digest, sha("x"), sha("y")})
			return err
		},
		func() error {
			return st.Record(ctx, sc, artifact.Record{ChainEnd: sha(fmt.Sprint("rec", seed)), Length: 1})
		},
		func() error { _, _, err := st.Get(ctx, "t", a.Digest); return err },
	}
	errs := make([]error, len(ops))
	for i, op := range ops {
		t0 := time.Now()
		errs[i] = op()
		if d := time.Since(t0); d > bound {
			t.Fatalf("call %d took %s, op timeout %s", i, d, opTimeout)
		}
	}
	return errs
}

func allFail(t *testing.T, what string, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err == nil {
			t.Fatalf("%s: call %d succeeded", what, i)
		}
		if errors.Is(err, artifact.ErrFull) {
			t.Fatalf("%s: call %d reported a full vault: %v", what, i, err)
		}
	}
}

func allWork(t *testing.T, what string, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: call %d: %v", what, i, err)
		}
	}
}

// A stalled server (SIGSTOP) or a killed one makes every call fail within
// its timeout; when the server is back, the same Store works again.
func TestOutageFailsFastAndRecovers(t *testing.T) {
	srv := startServer(t)
	st := srv.open(t, Config{OpTimeout: opTimeout})
	allWork(t, "up", calls(t, st, 1))

	srv.Pause()
	allFail(t, "stalled", calls(t, st, 2))
	srv.Resume()
	allWork(t, "resumed", calls(t, st, 3))

	// Killed while a stream of cold writes is under way: every call ends,
	// with an error or not, within its bound.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var slow error
	var mu sync.Mutex
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				st.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{testArt(1000*g+i+100, 20000)})
				if d := time.Since(t0); d > bound {
					mu.Lock()
					slow = fmt.Errorf("persist took %s", d)
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	srv.Kill()
	time.Sleep(2 * opTimeout)
	close(stop)
	wg.Wait()
	if slow != nil {
		t.Fatal(slow)
	}
	allFail(t, "killed", calls(t, st, 4))

	srv.Restart() // same port; data gone (no persistence), store not reopened
	allWork(t, "restarted", calls(t, st, 5))
}

// A server down at Open does not stop the store from opening (nor Caddy from
// starting); calls fail until it is up, then work, with its policy checked
// first.
func TestOpenWhileServerDown(t *testing.T) {
	srv := startServer(t)
	srv.Kill()
	st := srv.open(t, Config{OpTimeout: opTimeout})
	allFail(t, "down", calls(t, st, 1))
	srv.Restart()
	allWork(t, "up", calls(t, st, 2))

	// A server that turns out to evict keys is refused on first contact.
	srv.Kill()
	st2 := srv.open(t, Config{OpTimeout: opTimeout})
	srv.With("--maxmemory-policy", "allkeys-lru")
	srv.Restart()
	err := st2.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{testArt(3, 9000)})
	if !errors.Is(err, ErrEvictingPolicy) || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("persist on an evicting server: %v", err)
	}
}

// Artifacts persisted on an append-only server survive a crash (SIGKILL)
// and restart, exactly.
func TestAppendOnlySurvivesRestart(t *testing.T) {
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	st := srv.open(t, Config{OpTimeout: 2 * time.Second})
	ctx := context.Background()
	arts := []artifact.Artifact{testArt(1, 30000), testArt(2, 9000)}
	if err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, arts); err != nil {
		t.Fatal(err)
	}
	key, err := st.TenantKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Restart()
	for _, a := range arts {
		got, ok, err := st.Get(ctx, "t", a.Digest)
		if err != nil || !ok || got.Text != a.Text || string(got.Raw) != string(a.Raw) || got.Chars != a.Chars || got.Tool != a.Tool {
			t.Fatalf("artifact %x after restart: ok=%v err=%v", a.Digest[:4], ok, err)
		}
	}
	st2 := srv.open(t, Config{})
	if key2, err := st2.TenantKey(ctx); err != nil || string(key2) != string(key) {
		t.Fatalf("tenant key changed across restart: %v", err)
	}
}

// With min_replicas, Persist succeeds only once a replica acknowledged the
// write; without a replica it fails (within its timeout), not silently.
func TestMinReplicas(t *testing.T) {
	primary := startServer(t, "--repl-diskless-sync-delay", "0")
	// WAIT gets half the op timeout less a cron tick; a roomy timeout keeps
	// the server's answer (0 replicas) ahead of the client's deadline on a
	// loaded machine.
	const timeout = 2 * time.Second
	st := primary.open(t, Config{MinReplicas: 1, OpTimeout: timeout})
	ctx := context.Background()
	t0 := time.Now()
	err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{testArt(1, 9000)})
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("persist with no replica: %v, want ErrNotReplicated", err)
	}
	if d := time.Since(t0); d > timeout+bound-opTimeout {
		t.Fatalf("persist waited %s for a replica, op timeout %s", d, timeout)
	}
	// The write landed on the primary but no replica acknowledged it: a
	// retry must not confirm it as stored (its receipt would go out before
	// any replica has it), nor may Missing.
	if err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{testArt(1, 9000)}); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("retried persist with no replica: %v, want ErrNotReplicated", err)
	}
	if _, err := st.Missing(ctx, artifact.Scope{Tenant: "t"}, []artifact.Digest{testArt(1, 9000).Digest}); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("confirmation with no replica: %v, want ErrNotReplicated", err)
	}
	replica := startServer(t, "--replicaof", "127.0.0.1", fmt.Sprint(primary.Port))
	rc := replica.Client()
	// Online as the primary sees it (after the replica's first ack), which
	// is what WAIT counts.
	pc := primary.Client()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(pc.Info(ctx, "replication").Val(), "state=online"); {
		if time.Now().After(deadline) {
			t.Fatal("replica did not sync within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// With a replica, WAIT gets a roomy window: an ack that is merely slow
	// (-race on a loaded machine) is not what this part tests.
	roomy := primary.open(t, Config{MinReplicas: 1, OpTimeout: 20 * time.Second})
	if err := roomy.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{testArt(2, 9000)}); err != nil {
		t.Fatalf("persist with a replica: %v", err)
	}
	if n, err := rc.Exists(ctx, st.k.tenant("t").artifact(hexOf(testArt(2, 9000).Digest))).Result(); err != nil || n != 1 {
		t.Fatalf("artifact not on the replica: %d %v", n, err)
	}
	// The write that no replica acknowledged before is confirmed now that
	// one has caught up.
	if missing, err := roomy.Missing(ctx, artifact.Scope{Tenant: "t"}, []artifact.Digest{testArt(1, 9000).Digest}); err != nil || len(missing) != 0 {
		t.Fatalf("confirmation with a replica: %v %v", missing, err)
	}
}
