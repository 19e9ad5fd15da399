package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// lostAnswer is a store whose BeginEnd does its work and then loses the answer, as a timeout
// or a dropped connection does after Redis ran the script.
type lostAnswer struct{ pool.Store }

func (s lostAnswer) BeginEnd(ctx context.Context, l pool.Lease, end []byte) error {
	if err := s.Store.BeginEnd(ctx, l, end); err != nil {
		return err
	}
	return errors.New("read tcp 127.0.0.1:6379: i/o timeout")
}

// TestEndGoesOnWhenTheStoresAnswerIsLost: a release whose unbind and journal the store made
// but whose answer never came back still ends the lease now: its sandbox is destroyed and the
// journal emptied, where the lease used to be left unbound and unended, its sandbox running,
// until the node restarted (and a retried release found no lease to end).
func TestEndGoesOnWhenTheStoresAnswerIsLost(t *testing.T) {
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Pool: func(c *pool.Config) { c.Store = lostAnswer{c.Store} }})
	e.MustWarm(t, 1)
	ctx := context.Background()
	tok, _ := e.Issuer.Mint("task-lost", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Manager.Release(ctx, "acme", l.ID); err != nil {
		t.Fatalf("a release whose journal was written but whose answer was lost: %v", err)
	}
	if err := e.Manager.AwaitEnd(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	if !e.Runtime.Destroyed(l.Sandbox.ID) {
		t.Fatal("the lease's sandbox runs on after its release")
	}
	if journal, err := e.Store.Ending(ctx, "n1"); err != nil || len(journal) != 0 {
		t.Fatalf("the journal after the end: %v, %v; want it empty", journal, err)
	}
}

// journalTwice journals l's end as cut does, then a second end of the same lease in another
// sandbox (a pause whose destroy failed, then the resumed lease's own end), straight into the
// store's hash.
func journalTwice(t *testing.T, env *pooltest.Env, prefix string, l pool.Lease, other pool.Sandbox) {
	t.Helper()
	ctx := context.Background()
	all, err := env.Store.Ending(ctx, "n1")
	if err != nil || len(all[l.Sandbox.ID]) == 0 {
		t.Fatalf("the first end's journal: %v, %v", all, err)
	}
	var e map[string]any
	if err := json.Unmarshal(all[l.Sandbox.ID], &e); err != nil {
		t.Fatal(err)
	}
	lease := e["lease"].(map[string]any)
	sb := lease["sandbox"].(map[string]any)
	sb["id"] = other.ID
	raw, _ := json.Marshal(e)
	if err := env.RDB.HSet(ctx, prefix+"ending:n1", other.ID, raw).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRestartFinishesEveryEndOfALease: two journaled ends of one lease, in two sandboxes, are
// both finished at start, one after the other: the second used to be skipped (its lease was
// "ending already"), its sandbox then destroyed unread by the start's sweep and its end left
// in the journal.
func TestRestartFinishesEveryEndOfALease(t *testing.T) {
	redis := pooltest.NewEnv(t, pooltest.EnvConfig{Node: "holder"})
	ctx := context.Background()
	keep := func(c *pool.Config) { c.KeepOnStop = true }
	l := stoppedMidEnd(t, redis, "task-twice")
	other := pool.Sandbox{ID: "sb-old-pause", Node: "n1", Template: l.Sandbox.Template, Addr: l.Sandbox.Addr}
	journalTwice(t, redis, "holder:", l, other)

	sink := &recordSink{}
	second := pooltest.NewEnv(t, pooltest.EnvConfig{Node: "n1", Store: redis.Store,
		Runtime: func(r *pooltest.Runtime) { r.Node = "n1"; r.Running = []pool.Sandbox{l.Sandbox, other} },
		Pool:    func(c *pool.Config) { keep(c); c.Audit = sink }})
	if err := second.Manager.AwaitEnd(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := second.WaitWarm(ctx, 1, 10*time.Second); err != nil { // the start is over
		t.Fatal(err)
	}
	for _, id := range []string{l.Sandbox.ID, other.ID} {
		if !second.Runtime.Destroyed(id) {
			t.Fatalf("sandbox %s of a journaled end was not destroyed", id)
		}
	}
	if journal, err := redis.Store.Ending(ctx, "n1"); err != nil || len(journal) != 0 {
		t.Fatalf("the journal after the restart: %v, %v; want both ends finished", journal, err)
	}
	ended := 0
	for _, r := range sink.recs {
		if r.Lease == l.ID && strings.Contains(r.Reason, "finished when the node started again") {
			ended++
		}
	}
	if ended != 2 {
		t.Fatalf("%d records of the lease's ends finished at start, want 2", ended)
	}
}

// TestAwaitEndRefusesWhenTheStartFailed: a node whose start could not finish a journaled end
// (its destroy failed) does not serve that lease's receipt as if it were whole: AwaitEnd says
// the end is not finished, where it used to answer at once.
func TestAwaitEndRefusesWhenTheStartFailed(t *testing.T) {
	redis := pooltest.NewEnv(t, pooltest.EnvConfig{Node: "holder"})
	ctx := context.Background()
	keep := func(c *pool.Config) { c.KeepOnStop = true }
	l := stoppedMidEnd(t, redis, "task-failed-start")

	second := pooltest.NewEnv(t, pooltest.EnvConfig{Node: "n1", Store: redis.Store,
		Runtime: func(r *pooltest.Runtime) {
			r.Node = "n1"
			r.Running = []pool.Sandbox{l.Sandbox}
			r.FailDestroy(errors.New("the engine is gone"))
		},
		Pool: keep})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := second.Manager.AwaitEnd(wctx, "acme", l.ID)
	if err == nil || !strings.Contains(err.Error(), "not finished") {
		t.Fatalf("AwaitEnd on a node whose start failed to finish the lease's end: %v, want it refused as not finished", err)
	}
	if journal, jerr := redis.Store.Ending(ctx, "n1"); jerr != nil || len(journal[l.Sandbox.ID]) == 0 {
		t.Fatalf("the journal after a start that failed: %v, %v; want the end still journaled", journal, jerr)
	}
}

// stoppedMidEnd runs node n1 on redis's store, leases a sandbox of it for task and cuts the
// lease (its end journaled, its sandbox running), then stops that node as a crash would leave
// it; it returns the lease.
func stoppedMidEnd(t *testing.T, redis *pooltest.Env, task string) pool.Lease {
	t.Helper()
	ctx := context.Background()
	first, err := pooltest.Start(ctx, t.TempDir(), pooltest.EnvConfig{Node: "n1", Store: redis.Store,
		Pool: func(c *pool.Config) { c.KeepOnStop = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := first.WaitWarm(ctx, 2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	tok, _ := first.Issuer.Mint(task, "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := first.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.CutOnly(first.Manager, l); err != nil {
		t.Fatal(err)
	}
	return l
}
