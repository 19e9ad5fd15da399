package pool_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// endHookSink is a recordSink that calls hook with each record as it is written.
type endHookSink struct {
	recordSink
	hook func(audit.Record)
}

func (s *endHookSink) Write(ctx context.Context, r audit.Record) error {
	if s.hook != nil {
		s.hook(r)
	}
	return s.recordSink.Write(ctx, r)
}

// TestEndJournaledUntilRecorded: a lease's end leaves the journal only once its record is
// written. A node that stops between the destroy and the record (a crash, a kill) must find the
// end in the journal at its next start and record it then; an entry dropped before the record
// would leave a lease ended, its sandbox gone, and no record of its end, which its receipt
// would then be made without.
func TestEndJournaledUntilRecorded(t *testing.T) {
	sink := &endHookSink{}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Pool: func(c *pool.Config) { c.Audit = sink }})
	e.MustWarm(t, 1)
	ctx := context.Background()
	tok, _ := e.Issuer.Mint("task-journal", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen, journaled bool
	var jerr error
	sink.hook = func(r audit.Record) {
		if r.Lease != l.ID || r.Kind != audit.KindLease || r.Event != audit.EventRelease {
			return
		}
		journal, err := e.Store.Ending(context.Background(), "n1")
		mu.Lock()
		defer mu.Unlock()
		seen, jerr = true, err
		journaled = len(journal[l.Sandbox.ID]) > 0
	}
	if err := e.Manager.Release(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Manager.AwaitEnd(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !seen {
		t.Fatal("the release was not recorded")
	}
	if jerr != nil {
		t.Fatalf("reading the journal as the release was recorded: %v", jerr)
	}
	if !journaled {
		t.Fatalf("the end of sandbox %s had left the journal before its release was recorded: a node stopped then would never record it", l.Sandbox.ID)
	}
	if journal, err := e.Store.Ending(ctx, "n1"); err != nil || len(journal) != 0 {
		t.Fatalf("the journal after the end: %v, %v; want it empty", journal, err)
	}
}
