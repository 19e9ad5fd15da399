package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// newStore runs a real redis-server (installed by `make test`) on a unix socket.
func newStore(t *testing.T) *Store {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, err := devstack.StartRedis(ctx, t.TempDir())
	if err != nil {
		cancel()
		t.Fatalf("redis-server: %v (run the tests with `make test`, which installs it)", err)
	}
	t.Cleanup(func() { cancel(); r.Stop() })
	opts, _ := redis.ParseURL(r.URL)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return New(rdb, "test:")
}

func TestClaimIsExclusive(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for i := range 20 {
		s.AddWarm(ctx, pool.Sandbox{ID: fmt.Sprintf("sb-%02d", i), Template: "default", Node: "n1", Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 2)})})
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := s.Claim(ctx, "n1", "default")
			if errors.Is(err, pool.ErrNoWarm) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got[sb.ID]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(got) != 20 {
		t.Fatalf("claimed %d distinct sandboxes, want 20", len(got))
	}
	for id, n := range got {
		if n != 1 {
			t.Fatalf("sandbox %s claimed %d times", id, n)
		}
	}
}

func TestBindRebindUnbindAndWatch(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced := make(chan struct{}, 4)
	events := make(chan binding.Event, 16)
	go s.Watch(ctx, "n1", func() { synced <- struct{}{} }, func(e binding.Event) { events <- e })
	<-synced

	addr := netip.MustParseAddr("10.0.0.7")
	set, _ := scope.Parse([]scope.Scope{{Host: "a.example"}})
	l := pool.Lease{ID: "l-1", JTI: "j-1", Node: "n1", Task: "t", Template: "default",
		Sandbox: pool.Sandbox{ID: "sb-1", Addr: addr}, Expires: time.Now().Add(time.Minute)}
	b := binding.Binding{Lease: "l-1", Node: "n1", Addr: addr, Task: "t", Expires: l.Expires, Version: 1, Scopes: set}
	if _, err := s.Bind(ctx, l, b); err != nil {
		t.Fatal(err)
	}
	if e := <-events; !e.Bound || e.Lease != "l-1" {
		t.Fatalf("bind event %+v", e)
	}
	got, err := s.Lookup(ctx, "n1", addr)
	if err != nil || got.Lease != "l-1" || got.Scopes[0].Host != "a.example" {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
	// One token id binds one lease at a time.
	l2 := l
	l2.ID = "l-2"
	if _, err := s.Bind(ctx, l2, b); !errors.Is(err, pool.ErrJTIInUse) {
		t.Fatalf("second bind with the same jti = %v", err)
	}
	// Renewal moves the expiry.
	l.Expires, b.Expires, b.Version = time.Now().Add(time.Hour), time.Now().Add(time.Hour), 2
	if _, err := s.Rebind(ctx, l, l.JTI, b); err != nil {
		t.Fatal(err)
	}
	<-events
	if got, _ := s.GetLease(ctx, "l-1"); got.Expires.Before(time.Now().Add(59 * time.Minute)) {
		t.Fatalf("expiry after rebind: %s", got.Expires)
	}
	if err := s.Unbind(ctx, l); err != nil {
		t.Fatal(err)
	}
	if e := <-events; e.Bound {
		t.Fatalf("unbind event %+v", e)
	}
	if _, err := s.Lookup(ctx, "n1", addr); !errors.Is(err, binding.ErrUnknown) {
		t.Fatalf("lookup after unbind = %v", err)
	}
	// A released lease cannot be renewed back to life.
	if _, err := s.Rebind(ctx, l, l.JTI, b); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("rebind after release = %v", err)
	}
	// The token id is free again.
	if _, err := s.Bind(ctx, l2, b); err != nil {
		t.Fatalf("bind after release: %v", err)
	}
}

// Binding versions are ordered by Redis: every change, from whichever node and whatever its
// clock, gets a higher version than the one before, and the stored binding and its announcement
// carry the same one.
func TestBindingVersionsOrderedByRedis(t *testing.T) {
	s := newStore(t)
	other := New(s.rdb, "test:") // a second node on the same deployment
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced := make(chan struct{}, 4)
	events := make(chan binding.Event, 16)
	go s.Watch(ctx, "n1", func() { synced <- struct{}{} }, func(e binding.Event) { events <- e })
	<-synced
	addr := netip.MustParseAddr("10.0.0.8")
	set, _ := scope.Parse([]scope.Scope{{Host: "a.example"}})
	l := pool.Lease{ID: "l-v", JTI: "j-v", Node: "n1", Template: "default", Sandbox: pool.Sandbox{ID: "sb-v", Addr: addr},
		Expires: time.Now().Add(time.Minute)}
	// Whatever version the caller writes (a clock far ahead, say), the store's counter decides.
	b := binding.Binding{Lease: l.ID, Node: "n1", Addr: addr, Expires: l.Expires, Scopes: set, Version: time.Now().Add(24 * time.Hour).UnixNano()}
	v1, err := s.Bind(ctx, l, b)
	if err != nil {
		t.Fatal(err)
	}
	if e := <-events; e.Version != v1 {
		t.Fatalf("bind announced version %d, returned %d", e.Version, v1)
	}
	if got, _ := s.Lookup(ctx, "n1", addr); got.Version != v1 {
		t.Fatalf("stored version %d, returned %d", got.Version, v1)
	}
	v2, err := other.Rebind(ctx, l, l.JTI, b)
	if err != nil || v2 <= v1 {
		t.Fatalf("rebind from another node: version %d after %d (%v)", v2, v1, err)
	}
	<-events
	if err := other.Unbind(ctx, l); err != nil {
		t.Fatal(err)
	}
	if e := <-events; e.Bound || e.Version <= v2 {
		t.Fatalf("unbind announced %+v, after version %d", e, v2)
	}
}

// TestCounts reads every template's warm and leased sandboxes of a node in one call: each
// template counted apart, another node's not at all, and an unbound lease no longer.
func TestCounts(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	add := func(node, template string, i int) {
		if err := s.AddWarm(ctx, pool.Sandbox{ID: fmt.Sprintf("sb-%s-%s-%d", node, template, i), Template: template, Node: node,
			Addr: netip.AddrFrom4([4]byte{10, 1, byte(len(template)), byte(i + 2)})}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		add("n1", "default", i)
	}
	add("n1", "python", 0)
	add("n2", "default", 0)
	set, _ := scope.Parse([]scope.Scope{{Host: "a.example"}})
	var leases []pool.Lease
	for i := range 2 {
		addr := netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 2)})
		l := pool.Lease{ID: fmt.Sprintf("l-%d", i), JTI: fmt.Sprintf("j-%d", i), Node: "n1", Task: "t", Template: "python",
			Sandbox: pool.Sandbox{ID: fmt.Sprintf("sb-l-%d", i), Addr: addr}, Expires: time.Now().Add(time.Minute)}
		if _, err := s.Bind(ctx, l, binding.Binding{Lease: l.ID, Node: "n1", Addr: addr, Task: "t", Expires: l.Expires, Scopes: set}); err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	check := func(wantWarm, wantLeased []int) {
		t.Helper()
		warm, leased, err := s.Counts(ctx, "n1", []string{"default", "python", "node"})
		if err != nil || fmt.Sprint(warm) != fmt.Sprint(wantWarm) || fmt.Sprint(leased) != fmt.Sprint(wantLeased) {
			t.Fatalf("Counts = %v, %v, %v; want %v, %v", warm, leased, err, wantWarm, wantLeased)
		}
	}
	check([]int{3, 1, 0}, []int{0, 2, 0})
	if _, err := s.Claim(ctx, "n1", "default"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unbind(ctx, leases[0]); err != nil {
		t.Fatal(err)
	}
	check([]int{2, 1, 0}, []int{0, 1, 0})
}

// An address is bound to the lease of the sandbox there: a lease whose sandbox stopped (and
// gave its address to a new sandbox, whose lease bound it) cannot take it back by a renewal or
// a token swap, and its end removes only its own binding, not the one the new lease holds.
func TestAddressBoundToOneLease(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("10.0.0.9")
	set, _ := scope.Parse([]scope.Scope{{Host: "a.example"}})
	lease := func(id string) (pool.Lease, binding.Binding) {
		l := pool.Lease{ID: id, JTI: "j-" + id, Node: "n1", Task: "t", Template: "default",
			Sandbox: pool.Sandbox{ID: "sb-" + id, Addr: addr}, Expires: time.Now().Add(time.Minute)}
		return l, binding.Binding{Lease: id, Node: "n1", Addr: addr, Task: "t", Expires: l.Expires, Scopes: set}
	}
	a, ab := lease("l-a")
	if _, err := s.Bind(ctx, a, ab); err != nil {
		t.Fatal(err)
	}
	b, bb := lease("l-b")
	if _, err := s.Bind(ctx, b, bb); err != nil {
		t.Fatalf("the lease of the sandbox now at %s: %v", addr, err)
	}
	a.Expires, ab.Expires = time.Now().Add(time.Hour), time.Now().Add(time.Hour)
	if _, err := s.Rebind(ctx, a, a.JTI, ab); !errors.Is(err, ErrAddrBound) || !strings.Contains(err.Error(), "l-b") {
		t.Fatalf("a renewal of l-a, whose address l-b holds now: %v", err)
	}
	if err := s.Unbind(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup(ctx, "n1", addr); err != nil || got.Lease != "l-b" {
		t.Fatalf("after l-a's end, %s is bound to %+v (%v); want l-b still", addr, got, err)
	}
	// Its own renewal goes on as ever.
	b.Expires, bb.Expires = time.Now().Add(time.Hour), time.Now().Add(time.Hour)
	if _, err := s.Rebind(ctx, b, b.JTI, bb); err != nil {
		t.Fatalf("l-b's renewal: %v", err)
	}
}

// TestBeginEndJournalsWithTheUnbind: the unbind that begins a lease's end journals it in the
// same step; of two ends of one lease, the one that comes second neither unbinds nor journals
// anything; Ended removes the entry.
func TestBeginEndJournalsWithTheUnbind(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	sb := pool.Sandbox{ID: "sb-end", Template: "default", Node: "n1", Addr: netip.MustParseAddr("10.0.0.9")}
	l := pool.Lease{ID: "l-end", JTI: "j-end", Node: "n1", Template: "default", Sandbox: sb, Expires: time.Now().Add(time.Hour)}
	if _, err := s.Bind(ctx, l, binding.Binding{Lease: l.ID, Node: "n1", Addr: sb.Addr, Expires: l.Expires}); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginEnd(ctx, l, []byte(`{"first":true}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, "n1", sb.Addr); !errors.Is(err, binding.ErrUnknown) {
		t.Fatalf("the binding after BeginEnd: %v", err)
	}
	if _, err := s.GetLease(ctx, l.ID); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("the lease after BeginEnd: %v", err)
	}
	if err := s.BeginEnd(ctx, l, []byte(`{"second":true}`)); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("a second end of the lease: %v, want ErrLeaseNotFound", err)
	}
	got, err := s.Ending(ctx, "n1")
	if err != nil || len(got) != 1 || string(got[sb.ID]) != `{"first":true}` {
		t.Fatalf("the journal: %q, %v; want the first end alone", got, err)
	}
	if other, err := s.Ending(ctx, "n2"); err != nil || len(other) != 0 {
		t.Fatalf("another node's journal: %q, %v", other, err)
	}
	if err := s.BeginEnd(ctx, pool.Lease{ID: "l-x", Node: "n1"}, []byte("x")); err == nil {
		t.Fatal("an end naming no sandbox was journaled")
	}
	if err := s.Ended(ctx, "n1", sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Ending(ctx, "n1"); err != nil || len(got) != 0 {
		t.Fatalf("the journal after Ended: %q, %v", got, err)
	}
}
