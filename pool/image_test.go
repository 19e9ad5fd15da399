package pool_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// waitPool waits, up to 10 s, until the default template's pool satisfies ok.
func waitPool(t *testing.T, m *pool.Manager, what string, ok func(pool.PoolStatus) bool) pool.PoolStatus {
	t.Helper()
	var last pool.PoolStatus
	if err := wait.Until(10*time.Second, "the pool to come to "+what, func() bool {
		ps, err := m.Pools(context.Background())
		if err == nil && len(ps) > 0 {
			last = ps[0]
			return ok(last)
		}
		return false
	}); err != nil {
		t.Fatalf("%v (last %+v)", err, last)
	}
	return last
}

// TestRebuiltImageDrainsWarmSandboxes: sandboxes are keyed by the image id they were made
// from; when the template's image changes, the warm ones made from the old image are destroyed
// and replaced (a leased one is left to its lease), no lease is handed an old one meanwhile,
// and an image that cannot be used (missing, failing the hardening) stops new sandboxes while
// the checked ones keep serving.
func TestRebuiltImageDrainsWarmSandboxes(t *testing.T) {
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 2, MaxTotal: 6}},
		Runtime: func(rt *pooltest.Runtime) { rt.SetImage("sha256:one", nil) }})
	e.MustWarm(t, 2)
	ctx := context.Background()
	lease := func(task string) pool.Lease {
		t.Helper()
		tok, _ := e.Issuer.Mint(task, "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
		l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	held := lease("task-old")
	if held.Sandbox.Image != "sha256:one" {
		t.Fatalf("a sandbox made from sha256:one says it was made from %q", held.Sandbox.Image)
	}
	waitPool(t, e.Manager, "2 warm from sha256:one", func(p pool.PoolStatus) bool { return p.Warm == 2 && p.Image == "sha256:one" })
	created := e.Runtime.Created()

	// The rebuild: a lease taken at once gets a sandbox of the new image, whether or not the
	// drain has reached the pool yet.
	e.Runtime.SetImage("sha256:two", nil)
	waitPool(t, e.Manager, "the new image", func(p pool.PoolStatus) bool { return p.Image == "sha256:two" })
	if l := lease("task-new"); l.Sandbox.Image != "sha256:two" {
		t.Errorf("a lease after the rebuild got a sandbox of %q", l.Sandbox.Image)
	}
	waitPool(t, e.Manager, "2 warm from sha256:two", func(p pool.PoolStatus) bool { return p.Warm == 2 })
	warm, err := e.Store.ListWarm(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range warm {
		if sb.Image != "sha256:two" {
			t.Errorf("warm sandbox %s is still of %s", sb.ID, sb.Image)
		}
	}
	if e.Runtime.Created() < created+2 {
		t.Errorf("only %d sandboxes were made after the rebuild", e.Runtime.Created()-created)
	}
	if e.Runtime.Destroyed(held.Sandbox.ID) {
		t.Error("the drain destroyed a leased sandbox")
	}

	// An image that fails its checks: nothing new is made from it; the pool says why.
	e.Runtime.SetImage("", errors.New("fails the sandbox hardening checks: setuid: /usr/bin/evil"))
	p := waitPool(t, e.Manager, "an image error", func(p pool.PoolStatus) bool { return p.ImageError != "" })
	if !strings.Contains(p.ImageError, "setuid") {
		t.Errorf("pool status %+v", p)
	}
	before := e.Runtime.Created()
	l := lease("task-while-broken") // a checked sandbox still serves
	if l.Sandbox.Image != "sha256:two" {
		t.Errorf("lease while the image is refused got %q", l.Sandbox.Image)
	}
	pool.Refilled(t, e.Manager, "default") // what the refill would make, it has made
	if e.Runtime.Created() != before {
		t.Errorf("%d sandboxes were made from a refused image", e.Runtime.Created()-before)
	}
	if ok, why := e.Manager.Warm(ctx); ok || !strings.Contains(why, "setuid") {
		t.Errorf("Warm = %v %q, want the image's problem", ok, why)
	}
}
