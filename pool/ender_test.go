package pool_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// steps is the order in which a lease's end did what it did.
type steps struct {
	mu   sync.Mutex
	done []string
}

func (s *steps) add(step string) {
	s.mu.Lock()
	s.done = append(s.done, step)
	s.mu.Unlock()
}

func (s *steps) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.done)
}

// heldDestroys is a runtime whose destroys wait until hold is closed, noting each in steps.
type heldDestroys struct {
	*pooltest.Runtime
	hold  chan struct{}
	steps *steps
}

func (r *heldDestroys) Destroy(ctx context.Context, id string) error {
	select {
	case <-r.hold:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.steps.add("destroy " + id)
	return r.Runtime.Destroy(ctx, id)
}

// TestReleaseAnswersBeforeTheDestroy: a release answers once the lease is unbound (here and in
// the store, so the gateway and resolver know its sandbox no more) and what was minted for it
// is revoked, with its end journaled; its workspace is read, its sandbox destroyed and its end
// recorded after the answer, in that order; whoever waits for the end (a receipt) gets it only
// once all that is done, and the journal is empty then.
func TestReleaseAnswersBeforeTheDestroy(t *testing.T) {
	sink := &recordSink{}
	st := &steps{}
	hold := make(chan struct{})
	var rt *pooltest.Runtime
	e := pooltest.NewEnv(t, pooltest.EnvConfig{
		Runtime: func(r *pooltest.Runtime) {
			rt = r
			r.ExecFunc = func(_ context.Context, sb pool.Sandbox, req pool.ExecRequest, _ io.Reader, _, _ io.Writer) (int, error) {
				if strings.Contains(strings.Join(req.Cmd, " "), "tar -c") {
					st.add("read workspace " + sb.ID)
				}
				return 0, nil
			}
		},
		Pool: func(c *pool.Config) {
			c.Audit = sink
			c.Runtime = &heldDestroys{Runtime: rt, hold: hold, steps: st}
			c.Release = func(_ context.Context, lease string) error { st.add("revoke " + lease); return nil }
		}})
	e.MustWarm(t, 2)
	ctx := context.Background()
	tok, _ := e.Issuer.Mint("task-end", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() { answered <- e.Manager.Release(ctx, "acme", l.ID) }()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("release: %v", err)
		}
	case <-time.After(10 * time.Second):
		close(hold)
		t.Fatal("the release did not answer within 10 s while its sandbox's destroy was held: it waits for the destroy")
	}

	// Answered: unbound everywhere, revoked, journaled; nothing destroyed, nothing recorded yet.
	if _, err := e.Cache.Lookup(ctx, l.Sandbox.Addr); !errors.Is(err, binding.ErrUnknown) {
		t.Fatalf("the node's binding of the released sandbox: %v, want unknown", err)
	}
	if _, err := e.Store.Lookup(ctx, "n1", l.Sandbox.Addr); !errors.Is(err, binding.ErrUnknown) {
		t.Fatalf("the store's binding of the released sandbox: %v, want unknown", err)
	}
	if _, err := e.Manager.Get(ctx, "acme", l.ID); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("the released lease is still there: %v", err)
	}
	if got := st.list(); len(got) == 0 || got[0] != "revoke "+l.ID || slices.Contains(got, "destroy "+l.Sandbox.ID) {
		t.Fatalf("at the answer the end had done %v; want the revocation first and no destroy", got)
	}
	journal, err := e.Store.Ending(ctx, "n1")
	if err != nil || len(journal[l.Sandbox.ID]) == 0 {
		t.Fatalf("the journal at the answer: %v, %v; want the end of sandbox %s", journal, err, l.Sandbox.ID)
	}
	if strings.Contains(string(journal[l.Sandbox.ID]), tok) {
		t.Fatal("the journal of the end keeps the lease's task token")
	}
	for _, r := range sink.kind(audit.KindLease) {
		if r.Lease == l.ID && r.Event == audit.EventRelease {
			t.Fatalf("the release was recorded before its sandbox was destroyed: %+v", r)
		}
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = e.Manager.AwaitEnd(short, "acme", l.ID)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for the end while its destroy is held: %v, want it still under way", err)
	}
	// Another tenant waits for nothing: the lease is not theirs.
	if err := e.Manager.AwaitEnd(ctx, "globex", l.ID); err != nil {
		t.Fatalf("another tenant's wait: %v", err)
	}

	close(hold)
	if err := e.Manager.AwaitEnd(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	got := st.list()
	want := []string{"revoke " + l.ID, "read workspace " + l.Sandbox.ID, "destroy " + l.Sandbox.ID}
	if !slices.Equal(got, want) {
		t.Fatalf("the end's steps: %v, want %v", got, want)
	}
	var summary, released bool
	for _, r := range sink.recs {
		if r.Lease != l.ID {
			continue
		}
		summary = summary || r.Event == pool.EventWorkspace
		if r.Kind == audit.KindLease && r.Event == audit.EventRelease {
			released = true
			if !summary {
				t.Fatal("the release was recorded before the workspace's summary")
			}
		}
	}
	if !summary || !released {
		t.Fatalf("after the end: workspace summary %v, release record %v", summary, released)
	}
	if journal, err := e.Store.Ending(ctx, "n1"); err != nil || len(journal) != 0 {
		t.Fatalf("the journal after the end: %v, %v; want it empty", journal, err)
	}
}

// TestRestartFinishesJournaledEnds: a node that stopped right after unbinding a lease (its end
// journaled, its sandbox running) finishes that end when it starts again, before it adopts
// anything: the workspace is read, the sandbox destroyed (never adopted into the warm set nor
// handed out), the end recorded, and the journal emptied; a receipt asked for while it starts
// waits for it.
func TestRestartFinishesJournaledEnds(t *testing.T) {
	redis := pooltest.NewEnv(t, pooltest.EnvConfig{Node: "holder"}) // holds the Redis both runs share
	ctx := context.Background()
	keep := func(c *pool.Config) { c.KeepOnStop = true }
	l := stoppedMidEnd(t, redis, "task-crash") // it stops with the end journaled and the sandbox running

	if journal, err := redis.Store.Ending(ctx, "n1"); err != nil || len(journal[l.Sandbox.ID]) == 0 {
		t.Fatalf("the journal the stopped node left: %v, %v", journal, err)
	}
	sink := &recordSink{}
	st := &steps{}
	listed := make(chan struct{})
	var once sync.Once
	second := pooltest.NewEnv(t, pooltest.EnvConfig{Node: "n1", Store: redis.Store,
		Runtime: func(r *pooltest.Runtime) {
			r.Node = "n1" // its sandboxes are named apart from the first run's ("sb-n1-1", not "sb-1")
			r.Running = []pool.Sandbox{l.Sandbox}
			r.ExecFunc = func(_ context.Context, sb pool.Sandbox, req pool.ExecRequest, _ io.Reader, _, _ io.Writer) (int, error) {
				if strings.Contains(strings.Join(req.Cmd, " "), "tar -c") {
					st.add("read workspace " + sb.ID)
				}
				return 0, nil
			}
			// The first List is Reconcile's: by then the end must be over.
			r.ListHook = func() {
				once.Do(func() {
					if !r.Destroyed(l.Sandbox.ID) {
						st.add("listed before the end's destroy")
					}
					close(listed)
				})
			}
		},
		Pool: func(c *pool.Config) { keep(c); c.Audit = sink }})
	if err := second.Manager.AwaitEnd(ctx, "acme", l.ID); err != nil {
		t.Fatalf("waiting for the journaled end at start: %v", err)
	}
	select {
	case <-listed:
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted node did not reconcile within 10 s")
	}
	if got := st.list(); !slices.Equal(got, []string{"read workspace " + l.Sandbox.ID}) {
		t.Fatalf("the restart's steps: %v, want the workspace read before the destroy, and both before Reconcile", got)
	}
	if !second.Runtime.Destroyed(l.Sandbox.ID) {
		t.Fatal("the journaled end's sandbox was not destroyed")
	}
	var released audit.Record
	var summary bool
	for _, r := range sink.recs {
		if r.Lease == l.ID {
			summary = summary || r.Event == pool.EventWorkspace
			if r.Kind == audit.KindLease && r.Event == audit.EventRelease {
				released = r
			}
		}
	}
	if !summary || !strings.Contains(released.Reason, "finished when the node started again") {
		t.Fatalf("the restart's records of the end: workspace summary %v, release %+v", summary, released)
	}
	if journal, err := redis.Store.Ending(ctx, "n1"); err != nil || len(journal) != 0 {
		t.Fatalf("the journal after the restart: %v, %v; want it empty", journal, err)
	}
	warm, err := redis.Store.ListWarm(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range warm {
		if sb.ID == l.Sandbox.ID {
			t.Fatalf("the ended lease's sandbox %s was adopted into the warm set", sb.ID)
		}
	}
	if _, err := second.Manager.Get(ctx, "acme", l.ID); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("the ended lease after the restart: %v", err)
	}
}
