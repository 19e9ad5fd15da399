package pool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

type env struct {
	m     *pool.Manager
	rt    *pooltest.Runtime
	cache *binding.Cache
	iss   *token.DevIssuer
}

func newEnv(t *testing.T, tmpl pool.Template, gate chan struct{}, tweak ...func(*pooltest.Runtime)) *env {
	t.Helper()
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{tmpl},
		Runtime: func(rt *pooltest.Runtime) {
			rt.Gate = gate
			for _, o := range tweak {
				o(rt)
			}
		},
		Pool: func(c *pool.Config) { c.HealthEvery = 50 * time.Millisecond }})
	return &env{m: e.Manager, rt: e.Runtime, cache: e.Cache, iss: e.Issuer}
}

// openOnceWaiting opens gate, which holds the runtime's creations, once a lease waits for a
// sandbox of m's one template.
func openOnceWaiting(t *testing.T, m *pool.Manager, gate chan struct{}) {
	defer close(gate)
	if err := wait.Until(5*time.Second, "a lease to wait", func() bool {
		ps, err := m.Pools(context.Background())
		return err == nil && len(ps) == 1 && ps[0].Waiting > 0
	}); err != nil {
		t.Error(err)
	}
}

func (e *env) token(t *testing.T, ttl time.Duration) string {
	t.Helper()
	tok, err := e.iss.Mint(fmt.Sprintf("task-%d", time.Now().UnixNano()), "acme", []scope.Scope{{Host: "a.example"}}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func waitWarm(t *testing.T, m *pool.Manager, n int) {
	t.Helper()
	wait.For(t, 10*time.Second, fmt.Sprintf("pool to reach %d warm", n), func() bool {
		ps, _ := m.Pools(context.Background())
		return len(ps) == 1 && ps[0].Warm >= n
	})
}

var base = pool.Template{Name: "default", MinWarm: 2, MaxTotal: 4, DefaultTTL: time.Minute, MaxTTL: time.Hour}

func TestLeaseWarmReleaseAndRefill(t *testing.T) {
	e := newEnv(t, base, nil)
	waitWarm(t, e.m, 2)
	ctx := context.Background()
	l, err := e.m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, 10*time.Minute)})
	if err != nil || l.Start != "warm" {
		t.Fatalf("lease = %+v, %v", l, err)
	}
	// Visible to the gateway and resolver before Lease returned.
	if b, err := e.cache.Lookup(ctx, l.Sandbox.Addr); err != nil || b.Lease != l.ID {
		t.Fatalf("binding not visible: %v", err)
	}
	// The TTL is the template default, not the token's 10 minutes.
	if d := time.Until(l.Expires); d > time.Minute || d < 50*time.Second {
		t.Fatalf("expires in %s", d)
	}
	// Another tenant neither sees nor releases it.
	if _, err := e.m.Get(ctx, "other", l.ID); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("other tenant Get = %v", err)
	}
	if err := e.m.Release(ctx, "other", l.ID); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("other tenant Release = %v", err)
	}
	if err := e.m.Release(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cache.Lookup(ctx, l.Sandbox.Addr); !errors.Is(err, binding.ErrUnknown) {
		t.Fatalf("binding after release = %v", err)
	}
	if err := e.m.AwaitEnd(ctx, "acme", l.ID); err != nil { // the destroy follows the answer
		t.Fatal(err)
	}
	if !e.rt.Destroyed(l.Sandbox.ID) {
		t.Fatalf("sandbox %s not destroyed", l.Sandbox.ID)
	}
	waitWarm(t, e.m, 2)
}

func TestTokenRules(t *testing.T) {
	e := newEnv(t, base, nil)
	waitWarm(t, e.m, 2)
	ctx := context.Background()
	tok := e.token(t, 20*time.Second)
	l, err := e.m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(l.Expires) > 20*time.Second {
		t.Fatalf("lease outlives its token: %s", time.Until(l.Expires))
	}
	if _, err := e.m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok}); !errors.Is(err, pool.ErrJTIInUse) {
		t.Fatalf("second lease for one jti = %v", err)
	}
	if _, err := e.m.Lease(ctx, pool.LeaseRequest{Tenant: "globex", Template: "default", Token: e.token(t, time.Minute)}); !errors.Is(err, pool.ErrTokenRefused) {
		t.Fatalf("token of another tenant = %v", err)
	}
	if _, err := e.m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: "garbage"}); !errors.Is(err, pool.ErrTokenRefused) {
		t.Fatalf("garbage token = %v", err)
	}
}

func TestEmptyPool(t *testing.T) {
	t.Run("wait gives up with a reason", func(t *testing.T) {
		tmpl := base
		tmpl.OnEmpty, tmpl.WaitFor, tmpl.AfterWait = "wait", 200*time.Millisecond, "refuse"
		e := newEnv(t, tmpl, make(chan struct{})) // creations block: the pool stays empty
		_, err := e.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
		if !errors.Is(err, pool.ErrNoWarm) || !strings.Contains(err.Error(), "within 200ms") {
			t.Fatalf("lease on an empty pool = %v", err)
		}
	})
	t.Run("wait is served by the refill", func(t *testing.T) {
		tmpl := base
		tmpl.OnEmpty, tmpl.WaitFor = "wait", 5*time.Second
		gate := make(chan struct{})
		e := newEnv(t, tmpl, gate)
		go openOnceWaiting(t, e.m, gate)
		l, err := e.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
		if err != nil || l.Start != "waited" {
			t.Fatalf("lease = %+v, %v", l, err)
		}
	})
	t.Run("cold start", func(t *testing.T) {
		tmpl := base
		tmpl.MinWarm, tmpl.OnEmpty = 0, "cold"
		e := newEnv(t, tmpl, nil)
		l, err := e.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
		if err != nil || l.Start != "cold" {
			t.Fatalf("lease = %+v, %v", l, err)
		}
	})
}

func TestReaperEndsExpiredLeases(t *testing.T) {
	e := newEnv(t, base, nil)
	waitWarm(t, e.m, 2)
	ctx := context.Background()
	l, err := e.m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute), TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 4*time.Second, "the reaper to end the expired lease", func() bool {
		_, err := e.m.Get(ctx, "acme", l.ID)
		return errors.Is(err, pool.ErrLeaseNotFound)
	})
	if err := e.m.AwaitEnd(ctx, "acme", l.ID); err != nil { // the destroy follows the unbind
		t.Fatal(err)
	}
	if !e.rt.Destroyed(l.Sandbox.ID) {
		t.Fatal("expired lease's sandbox not destroyed")
	}
}

func TestUnhealthyWarmSandboxIsReplaced(t *testing.T) {
	e := newEnv(t, base, nil)
	waitWarm(t, e.m, 2)
	e.rt.SetSick("sb-1")
	wait.For(t, 3*time.Second, "the unhealthy sandbox to be destroyed", func() bool { return e.rt.Destroyed("sb-1") })
	waitWarm(t, e.m, 2)
	// Every lease now gets a healthy sandbox.
	for range 2 {
		l, err := e.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
		if err != nil || l.Sandbox.ID == "sb-1" {
			t.Fatalf("lease = %+v, %v", l, err)
		}
	}
}

func TestReconcileAdoptsAndCleans(t *testing.T) {
	ctx := context.Background()
	sb := func(id string, last byte) pool.Sandbox {
		return pool.Sandbox{ID: id, Template: "default", Node: "n1", Addr: netip.AddrFrom4([4]byte{10, 1, 0, last})}
	}
	warmKept, warmGone := sb("warm-kept", 2), sb("warm-gone", 3)
	leased, vanished, expired, orphan := sb("leased", 4), sb("vanished", 5), sb("expired", 6), sb("orphan", 7)
	e := pooltest.NewEnv(t, pooltest.EnvConfig{NoRun: true, Templates: []pool.Template{base},
		Runtime: func(rt *pooltest.Runtime) { rt.Running = []pool.Sandbox{warmKept, leased, expired, orphan} },
		Pool:    func(c *pool.Config) { c.KeepOnStop = true }})
	store, rt, m := e.Store, e.Runtime, e.Manager
	store.AddWarm(ctx, warmKept)
	store.AddWarm(ctx, warmGone)
	bind := func(id string, s pool.Sandbox, expires time.Time) {
		l := pool.Lease{ID: id, JTI: "j-" + id, Node: "n1", Template: "default", Sandbox: s, Expires: expires, Tenant: "acme"}
		if _, err := store.Bind(ctx, l, binding.Binding{Lease: id, Node: "n1", Addr: s.Addr, Expires: expires, Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	bind("l-live", leased, time.Now().Add(time.Hour))
	bind("l-vanished", vanished, time.Now().Add(time.Hour))
	bind("l-expired", expired, time.Now().Add(-time.Second)) // ended before the restart
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"orphan", "expired"} {
		if !rt.Destroyed(id) {
			t.Errorf("%s not destroyed", id)
		}
	}
	for _, id := range []string{"warm-kept", "leased"} {
		if rt.Destroyed(id) {
			t.Errorf("%s destroyed", id)
		}
	}
	warm, _ := store.ListWarm(ctx, "n1")
	if len(warm) != 1 || warm[0].ID != "warm-kept" {
		t.Errorf("warm after reconcile: %v", warm)
	}
	leases, _ := store.ListLeases(ctx, "n1")
	if len(leases) != 1 || leases[0].ID != "l-live" {
		t.Errorf("leases after reconcile: %v", leases)
	}
}

// Health checks take each warm sandbox out of the warm set for a moment; the refill must not
// replace it meanwhile, or the pool grows past min_warm with every round of checks.
func TestHealthChecksDoNotOverfill(t *testing.T) {
	tmpl := base
	tmpl.MaxTotal = 50
	// Slow checks widen the window a refill could fall into.
	e := newEnv(t, tmpl, nil, func(rt *pooltest.Runtime) { rt.CheckDelay = 30 * time.Millisecond })
	// Warm is seldom 2 at the instant a poll looks, with checks this slow and this often: the
	// two sandboxes made is the step to wait for.
	wait.For(t, 10*time.Second, "the pool's 2 sandboxes to be made", func() bool { return e.rt.Created() >= 2 })
	// Rounds of checks, each holding both sandboxes out in turn, and a refill pass after each.
	for range 10 {
		rounds := pool.HealthChecks(e.m)
		wait.For(t, 5*time.Second, "a round of health checks", func() bool { return pool.HealthChecks(e.m) > rounds })
		pool.Refilled(t, e.m, "default")
		if n := e.rt.Created(); n > 2 {
			t.Fatalf("health checks made the pool create %d sandboxes for a min_warm of 2", n)
		}
	}
}

// recordSink keeps the records written to it.
type recordSink struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (s *recordSink) Write(_ context.Context, r audit.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
	return nil
}

func (s *recordSink) files() []audit.Record { return s.kind(audit.KindFile) }

// kind is the records of kind k, in order.
func (s *recordSink) kind(k audit.Kind) []audit.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []audit.Record
	for _, r := range s.recs {
		if r.Kind == k {
			out = append(out, r)
		}
	}
	return out
}

// TestFileRefusalsRecorded: a transfer the pool refuses, for a path outside the workspace, is
// recorded as the denied file event it would have been, under rule bad-request; one it carries
// out is an allow with no rule.
func TestFileRefusalsRecorded(t *testing.T) {
	sink := &recordSink{}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Pool: func(c *pool.Config) { c.Audit = sink }})
	e.MustWarm(t, 1)
	ctx := context.Background()
	tok, _ := e.Issuer.Mint("task-files", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Manager.PutFile(ctx, "acme", l.ID, "notes.txt", strings.NewReader("x"), false); err != nil {
		t.Fatalf("upload inside the workspace: %v", err)
	}
	cases := []struct {
		event audit.Event
		do    func() error
	}{
		{"download", func() error { return e.Manager.StatFile(ctx, "acme", l.ID, "../../etc/passwd", false) }},
		{"download-tar", func() error { _, err := e.Manager.GetFile(ctx, "acme", l.ID, "/etc", io.Discard, true); return err }},
		{"upload", func() error {
			_, err := e.Manager.PutFile(ctx, "acme", l.ID, "/workspace/../etc/x", strings.NewReader("x"), false)
			return err
		}},
	}
	for _, c := range cases {
		if err := c.do(); !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("%s outside the workspace = %v, want ErrBadRequest", c.event, err)
		}
	}
	// The workspace itself is a folder: an archive goes in or out of it, a single file cannot.
	if _, err := e.Manager.PutFile(ctx, "acme", l.ID, "/workspace", strings.NewReader(""), true); err != nil {
		t.Errorf("an archive into the workspace itself: %v", err)
	}
	if err := e.Manager.StatFile(ctx, "acme", l.ID, ".", false); !errors.Is(err, pool.ErrBadRequest) || !strings.Contains(err.Error(), "the workspace itself") {
		t.Errorf("the workspace as a file: %v", err)
	}
	recs := sink.files()
	recs = recs[:len(recs)-2]
	if len(recs) != 1+len(cases) {
		t.Fatalf("file records %+v, want %d", recs, 1+len(cases))
	}
	if r := recs[0]; r.Event != "upload" || r.Decision != audit.Allow || r.Rule != "" || r.Path != "/workspace/notes.txt" {
		t.Errorf("the upload's record is %+v", r)
	}
	for i, c := range cases {
		if r := recs[1+i]; r.Event != c.event || r.Decision != audit.Deny || r.Rule != rule.BadRequest || r.Lease != l.ID ||
			!strings.Contains(r.Reason, "outside the workspace") {
			t.Errorf("the refused %s's record is %+v", c.event, r)
		}
	}
}

// TestReleaseRunsToTheEnd: a client that hangs up once a release has begun (here, while its
// credentials are being revoked) does not cut the release short: revocation and destruction
// run on, and the lease's record says how it went, failures included.
func TestReleaseRunsToTheEnd(t *testing.T) {
	sink := &recordSink{}
	var revokeErr error
	reqCtx, hangUp := context.WithCancel(context.Background())
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Pool: func(c *pool.Config) {
		c.Audit = sink
		c.Release = func(ctx context.Context, lease string) error {
			hangUp() // the client goes away mid-release
			revokeErr = ctx.Err()
			return nil
		}
	}})
	e.MustWarm(t, 2)
	tok, _ := e.Issuer.Mint("task-release", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := e.Manager.Lease(reqCtx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Manager.Release(reqCtx, "acme", l.ID); err != nil {
		t.Fatalf("release with the client gone mid-way: %v", err)
	}
	if err := e.Manager.AwaitEnd(context.Background(), "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	if revokeErr != nil {
		t.Fatalf("revocation ran on the client's ended context: %v", revokeErr)
	}
	if !e.Runtime.Destroyed(l.Sandbox.ID) {
		t.Fatal("the sandbox was not destroyed once the client hung up")
	}
	// A destroy that fails is in the record.
	e.Runtime.FailDestroy(errors.New("engine gone"))
	tok, _ = e.Issuer.Mint("task-release-2", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l2, err := e.Manager.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	e.Manager.Release(context.Background(), "acme", l2.ID)
	if err := e.Manager.AwaitEnd(context.Background(), "acme", l2.ID); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var reasons []string
	for _, r := range sink.recs {
		if r.Kind == audit.KindLease && r.Event == "release" {
			reasons = append(reasons, r.Lease+": "+r.Reason)
		}
	}
	if len(reasons) != 2 || reasons[0] != l.ID+": " || !strings.Contains(reasons[1], "destroying the sandbox failed: engine gone") {
		t.Fatalf("release records %q", reasons)
	}
}

// TestSwapRevokesReleaseEnds: a token swap revokes the lease's material and lets it mint again
// (Revoke); only the lease's end makes the broker stop minting for it (Release).
func TestSwapRevokesReleaseEnds(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	note := func(what string) func(context.Context, string) error {
		return func(_ context.Context, lease string) error {
			mu.Lock()
			calls = append(calls, what+" "+lease)
			mu.Unlock()
			return nil
		}
	}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Pool: func(c *pool.Config) { c.Revoke, c.Release = note("revoke"), note("release") }})
	e.MustWarm(t, 1)
	ctx := context.Background()
	tok, _ := e.Issuer.Mint("task-swap", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	tok2, _ := e.Issuer.Mint("task-swap", "acme", []scope.Scope{{Host: "b.example"}}, time.Minute)
	if _, err := e.Manager.SwapToken(ctx, "acme", l.ID, tok2); err != nil {
		t.Fatal(err)
	}
	if err := e.Manager.Release(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"revoke " + l.ID, "release " + l.ID}; strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Fatalf("calls %q, want %q", calls, want)
	}
}
