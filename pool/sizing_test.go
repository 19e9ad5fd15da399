package pool_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
)

// status is the one template's pool status.
func status(t *testing.T, m *pool.Manager) pool.PoolStatus {
	t.Helper()
	ps, err := m.Pools(context.Background())
	if err != nil || len(ps) != 1 {
		t.Fatalf("pools = %v, %v", ps, err)
	}
	return ps[0]
}

func until(t *testing.T, m *pool.Manager, what string, cond func(pool.PoolStatus) bool) {
	t.Helper()
	var last pool.PoolStatus
	if err := wait.Until(10*time.Second, what, func() bool { last = status(t, m); return cond(last) }); err != nil {
		t.Fatalf("%v (last: %+v)", err, last)
	}
}

type leased struct {
	i     int
	lease pool.Lease
	err   error
}

// TestWaitingLeasesServedInArrivalOrder queues leases on an empty pool whose creations are
// held, then lets the sandboxes through one at a time: each goes to the lease that has waited
// longest, and a lease that came later, while others wait, does not pass them even though a
// sandbox was put in the warm set.
func TestWaitingLeasesServedInArrivalOrder(t *testing.T) {
	tmpl := base
	tmpl.MinWarm, tmpl.MaxWarm, tmpl.MaxTotal, tmpl.WaitFor, tmpl.AfterWait = 0, 8, 8, 10*time.Second, "refuse"
	gate := make(chan struct{})
	e := newEnv(t, tmpl, gate)
	out := make(chan leased, 5)
	for i := range 5 {
		go func() {
			l, err := e.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
			out <- leased{i, l, err}
		}()
		until(t, e.m, fmt.Sprintf("lease %d to wait", i), func(p pool.PoolStatus) bool { return p.Waiting == i+1 })
	}
	st := status(t, e.m)
	if st.Target != 5 {
		t.Fatalf("five leases waited on a pool of floor 0: target %d, want 5", st.Target)
	}
	for want := range 5 {
		gate <- struct{}{} // one creation goes through
		select {
		case got := <-out:
			if got.err != nil || got.i != want || got.lease.Start != "waited" {
				t.Fatalf("sandbox %d went to lease %d (%+v, %v), want lease %d", want, got.i, got.lease, got.err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no lease was served 5 s after sandbox %d was made", want)
		}
	}
}

// TestOnEmpty covers each answer a lease gets when nothing is warm.
func TestOnEmpty(t *testing.T) {
	lease := func(e *env) (pool.Lease, error) {
		return e.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
	}
	t.Run("refuse", func(t *testing.T) {
		tmpl := base
		tmpl.MinWarm, tmpl.OnEmpty = 0, "refuse"
		e := newEnv(t, tmpl, make(chan struct{}))
		start := time.Now()
		_, err := lease(e)
		if !errors.Is(err, pool.ErrNoWarm) || !strings.Contains(err.Error(), "on_empty: refuse") {
			t.Fatalf("lease = %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("refused after %s, not at once", d)
		}
	})
	t.Run("wait then cold", func(t *testing.T) {
		tmpl := base
		tmpl.MinWarm, tmpl.OnEmpty, tmpl.WaitFor, tmpl.AfterWait = 0, "wait", 200*time.Millisecond, "cold"
		gate := make(chan struct{})
		e := newEnv(t, tmpl, gate)
		// The refill's creation and the cold start are both held until the wait is over.
		go func() {
			defer close(gate)
			var waited bool
			if err := wait.Until(5*time.Second, "the lease to wait and give up", func() bool {
				st, err := e.m.Pools(context.Background())
				if err != nil || len(st) != 1 {
					return false
				}
				waited = waited || st[0].Waiting > 0
				return waited && st[0].Waiting == 0
			}); err != nil {
				t.Error(err)
			}
		}()
		l, err := lease(e)
		if err != nil || l.Start != "cold" {
			t.Fatalf("lease = %+v, %v", l, err)
		}
	})
	t.Run("wait then refuse", func(t *testing.T) {
		tmpl := base
		tmpl.MinWarm, tmpl.OnEmpty, tmpl.WaitFor, tmpl.AfterWait = 0, "wait", 200*time.Millisecond, "refuse"
		e := newEnv(t, tmpl, make(chan struct{}))
		_, err := lease(e)
		if !errors.Is(err, pool.ErrNoWarm) || !strings.Contains(err.Error(), "within 200ms") {
			t.Fatalf("lease = %v", err)
		}
		if st := status(t, e.m); st.Waiting != 0 {
			t.Fatalf("the refused lease still counts as waiting: %+v", st)
		}
	})
	t.Run("a lease that gives up while waiting leaves the queue", func(t *testing.T) {
		tmpl := base
		tmpl.MinWarm, tmpl.MaxWarm, tmpl.WaitFor = 0, 2, 10*time.Second
		gate := make(chan struct{})
		e := newEnv(t, tmpl, gate)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := e.m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
			done <- err
		}()
		until(t, e.m, "the lease to wait", func(p pool.PoolStatus) bool { return p.Waiting == 1 })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled lease = %v", err)
		}
		close(gate)
		// The sandbox made for it is not lost: its wait raised the target to one, and it is
		// warm for the next lease.
		until(t, e.m, "the sandbox made for it to be warm", func(p pool.PoolStatus) bool { return p.Waiting == 0 && p.Warm >= 1 })
		if l, err := lease(e); err != nil || l.Start != "warm" {
			t.Fatalf("next lease = %+v, %v", l, err)
		}
	})
}

// TestLeaseWaitsForStart leases while the node is still starting (its start sweeps the store
// and the runtime of what an earlier run left): the lease waits for the sweep, so it is not
// swept away with it, and it counts against max_total from then on. A lease served during the
// sweep had its record unbound while its sandbox lived on, uncounted.
func TestLeaseWaitsForStart(t *testing.T) {
	tmpl := base
	tmpl.MinWarm, tmpl.MaxWarm, tmpl.MaxTotal, tmpl.OnEmpty = 0, 1, 2, "cold"
	listing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := pooltest.NewEnv(t, pooltest.EnvConfig{NoRun: true, Templates: []pool.Template{tmpl},
		Runtime: func(rt *pooltest.Runtime) {
			rt.ListHook = func() { once.Do(func() { close(listing); <-release }) }
		}})
	m := &env{m: e.Manager, rt: e.Runtime, iss: e.Issuer}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { e.Manager.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }()
	<-listing // the start's sweep is under way
	type result struct {
		l   pool.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := e.Manager.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: m.token(t, time.Minute)})
		got <- result{l, err}
	}()
	var r result
	served := false // during the sweep: the fault this test is about
	if err := wait.Until(10*time.Second, "the lease to wait for the node's start", func() bool {
		select {
		case r = <-got:
			served = true
			return true
		default:
			return pool.WaitingForStart(e.Manager) > 0
		}
	}); err != nil {
		close(release)
		t.Fatal(err)
	}
	close(release)
	if !served {
		select {
		case r = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the lease did not return within 10 s of the node's start")
		}
	}
	if r.err != nil {
		t.Fatalf("lease at start: %v", r.err)
	}
	select {
	case <-pool.Started(e.Manager):
	case <-time.After(10 * time.Second):
		t.Fatal("the node's start sweep did not end within 10 s")
	}
	if _, err := e.Manager.Get(context.Background(), "acme", r.l.ID); err != nil {
		t.Fatalf("the lease granted at start was swept away: %v", err)
	}
	if st := status(t, e.Manager); st.Leased != 1 {
		t.Fatalf("the lease granted at start is not counted: %+v", st)
	}
}

// TestNoMoreThanMaxTotal sends many leases at once at a small pool that starts cold ones:
// however they interleave with the refill, the node never holds more than max_total sandboxes,
// and the leases past it are refused with the reason.
func TestNoMoreThanMaxTotal(t *testing.T) {
	tmpl := base
	tmpl.MinWarm, tmpl.MaxWarm, tmpl.MaxTotal, tmpl.OnEmpty = 1, 3, 3, "cold"
	var peak atomic.Int64
	e := newEnv(t, tmpl, nil, func(rt *pooltest.Runtime) {
		rt.CheckDelay = 20 * time.Millisecond // room for the refill and the leases to interleave
	})
	watch := make(chan struct{})
	go func() {
		for {
			select {
			case <-watch:
				return
			case <-time.After(time.Millisecond):
				if n := int64(e.rt.Alive()); n > peak.Load() {
					peak.Store(n)
				}
			}
		}
	}()
	defer close(watch)
	var wg sync.WaitGroup
	var granted, refused atomic.Int32
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
			switch {
			case err == nil:
				granted.Add(1)
			case errors.Is(err, pool.ErrNoWarm) && strings.Contains(err.Error(), "max_total of 3"):
				refused.Add(1)
			default:
				t.Errorf("lease = %v", err)
			}
		}()
	}
	wg.Wait()
	pool.Refilled(t, e.m, "default") // the refill's last word
	if g := granted.Load(); g > 3 || g+refused.Load() != 12 {
		t.Fatalf("granted %d, refused %d of 12 at max_total 3", g, refused.Load())
	}
	if p := peak.Load(); p > 3 {
		t.Fatalf("%d sandboxes alive at once, max_total is 3", p)
	}
}

// TestMemoryBudget bounds the pool by the node's memory budget across templates: a pool whose
// leases wait grows its target, but never makes sandboxes whose memory limits would pass the
// budget, and a budget that cannot hold the floors is refused at start.
func TestMemoryBudget(t *testing.T) {
	tmpl := pooltest.Template(base)
	tmpl.MinWarm, tmpl.MaxWarm, tmpl.MaxTotal, tmpl.MemoryMB, tmpl.WaitFor, tmpl.AfterWait = 1, 6, 10, 256, 300*time.Millisecond, "refuse"
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{tmpl},
		Pool: func(c *pool.Config) { c.MemoryBudgetMB = 3 * 256 }})
	m := &env{m: e.Manager, rt: e.Runtime, iss: e.Issuer}
	until(t, m.m, "the floor", func(p pool.PoolStatus) bool { return p.Warm == 1 })
	var errs []error
	for range 5 {
		if _, err := m.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: m.token(t, time.Minute)}); err != nil {
			errs = append(errs, err)
		}
	}
	pool.Refilled(t, m.m, "default")
	st := status(t, m.m)
	if st.Leased != 3 || len(errs) != 2 || st.Warm != 0 || e.Runtime.Alive() != 3 {
		t.Fatalf("budget of 3 sandboxes: %+v, %d alive, refused %v", st, e.Runtime.Alive(), errs)
	}
	if st.Target <= 1 {
		t.Fatalf("leases waited but the target stayed at %d", st.Target)
	}
	_, err := pool.New(pool.Config{Templates: []pool.Template{tmpl, func() pool.Template { u := tmpl; u.Name = "b"; u.MinWarm = 3; return u }()},
		MemoryBudgetMB: 3 * 256})
	if err == nil || !strings.Contains(err.Error(), "memory budget of 768 MiB") {
		t.Fatalf("floors of 4 sandboxes under a budget of 3: %v", err)
	}
}

// TestPoolGrowsAndShrinksBack grows a pool by leases that wait, then idles it on the sizing
// clock: the warm sandboxes above the target are destroyed as it falls, down to the floor.
func TestPoolGrowsAndShrinksBack(t *testing.T) {
	tmpl := base
	tmpl.MinWarm, tmpl.MaxWarm, tmpl.MaxTotal, tmpl.WaitFor = 1, 6, 12, 5*time.Second
	// No health checks: each holds a warm sandbox out of the warm set for a moment, and a status
	// read then would count one warm sandbox short of what the pool holds.
	pe := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{tmpl}, Pool: func(c *pool.Config) { c.HealthEvery = time.Hour }})
	e := &env{m: pe.Manager, rt: pe.Runtime, cache: pe.Cache, iss: pe.Issuer}
	var mu sync.Mutex
	now := time.Now()
	pool.SetSizingClock(e.m, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	waitWarm(t, e.m, 1)
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := e.m.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: e.token(t, time.Minute)})
			if err == nil {
				err = e.m.Release(context.Background(), "acme", l.ID)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	until(t, e.m, "the grown pool to fill", func(p pool.PoolStatus) bool { return p.Target > 1 && p.Warm == p.Target })
	grown := status(t, e.m).Target
	advance(59 * time.Second)
	pool.Refilled(t, e.m, "default") // a refill or two at the held target
	pool.Refilled(t, e.m, "default")
	if st := status(t, e.m); st.Target != grown || st.Warm != grown {
		t.Fatalf("within the minute's hold: %+v, want target and warm %d", st, grown)
	}
	for range 10 {
		advance(30 * time.Second)
		pool.Refilled(t, e.m, "default")
	}
	until(t, e.m, "the idle pool back at its floor", func(p pool.PoolStatus) bool { return p.Target == 1 && p.Warm == 1 && p.Creating == 0 })
}
