package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// The end of a lease comes in two parts. What its security rests on comes first, and the
// caller waits for it: the lease is unbound here and in the store (which announces it), the
// gateway closes what the sandbox's address holds (Cutter), and what was minted for it is
// revoked. From then on nothing reaches the sandbox and nothing it kept works. What follows
// takes the engine's time, and a release does not wait for it: the lease's processes stop, its
// workspace is read and what changed recorded, its caches are written back, its sandbox is
// destroyed, and its end is recorded. That second part is journaled in the store in the same
// step that unbinds the lease (Leases.BeginEnd), so it finishes whatever the client or the node
// does: a node that restarts finishes every end it finds there before it adopts or clears
// anything (the sandbox, referred to by no lease and no warm set, is never handed out again,
// and it keeps its address until it is destroyed). The ender runs these second parts, a few at
// a time and at a lower priority than the refill's creations, and whoever asks for a lease's
// receipt or its records waits for its end (AwaitEnd).

// ending is one lease's end under way, as journaled.
type ending struct {
	Lease Lease       `json:"lease"`
	Event audit.Event `json:"event"`
	Note  string      `json:"note,omitempty"`
	Began time.Time   `json:"began"`

	// problems are what went wrong so far (a revocation that failed), for the record.
	problems []string
	// done is closed once the end is over; err is the destroy's failure, if any.
	done chan struct{}
	err  error
}

// revokes reports whether e's revocation is Config.Revoke (a pause, after which the lease may
// be minted for again once resumed) rather than Config.Release.
func (e *ending) revokes() bool { return e.Event == audit.EventPause }

// ender runs the second part of each lease's end on this node. Safe for concurrent use.
type ender struct {
	// run bounds the ends whose second part runs at once.
	run chan struct{}
	// slots are the engine's: a destroy takes one only when no creation waits for it.
	slots engineSlots
	wg    sync.WaitGroup

	mu      sync.Mutex
	pending map[string]*ending // by lease id: ends begun and not over
	stopped bool               // the node stops: ends begun now run in their caller
}

// endParallel is how many ends' second parts run at once.
const endParallel = 2

// endDefer bounds how long a destroy yields its engine slot to creations waiting for one:
// after it, it takes the next slot free, so a long burst cannot leave ended sandboxes (and
// the memory they hold) waiting without end.
const endDefer = 2 * time.Second

func newEnder(slots engineSlots) *ender {
	return &ender{run: make(chan struct{}, endParallel), slots: slots, pending: map[string]*ending{}}
}

// begin registers e as under way, or fails when an end of its lease is already.
func (en *ender) begin(e *ending) error {
	en.mu.Lock()
	defer en.mu.Unlock()
	if _, ok := en.pending[e.Lease.ID]; ok {
		return fmt.Errorf("%w: lease %s is ending already", ErrLeaseNotFound, e.Lease.ID)
	}
	e.done = make(chan struct{})
	en.pending[e.Lease.ID] = e
	return nil
}

// of returns the end of lease id under way, or nil.
func (en *ender) of(id string) *ending {
	en.mu.Lock()
	defer en.mu.Unlock()
	return en.pending[id]
}

// over ends e's registration and wakes whoever waits for it.
func (en *ender) over(e *ending) {
	en.mu.Lock()
	if en.pending[e.Lease.ID] == e {
		delete(en.pending, e.Lease.ID)
	}
	en.mu.Unlock()
	close(e.done)
}

// start runs f, an end's second part, in the background, at most endParallel at once;
// once the node stops (drain), it runs f in the caller instead.
func (en *ender) start(f func()) {
	en.mu.Lock()
	if en.stopped {
		en.mu.Unlock()
		f()
		return
	}
	en.wg.Add(1)
	en.mu.Unlock()
	go func() {
		defer en.wg.Done()
		en.run <- struct{}{}
		defer func() { <-en.run }()
		f()
	}()
}

// drain waits for the ends under way, which run to their end on contexts of their own; ends
// begun from now on run in their callers.
func (en *ender) drain() {
	en.mu.Lock()
	en.stopped = true
	en.mu.Unlock()
	en.wg.Wait()
}

// engineSlots are the slots the refill's creations take from the engine (supply.sem, a slot
// taken by sending into it). A destroy is worth less than a creation a lease may be waiting
// for: it takes a slot only when it can without waiting, which it cannot while creations queue
// for one (each slot freed goes to the first of them), and after endDefer it queues as they
// do. Nil: no slots to share.
type engineSlots chan struct{}

// take waits for a slot as above, as long as ctx allows; the function it returns gives it back.
func (s engineSlots) take(ctx context.Context) func() {
	if s == nil {
		return func() {}
	}
	give := func() { <-s }
	deadline := time.NewTimer(endDefer)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case s <- struct{}{}:
			return give
		default:
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			select {
			case s <- struct{}{}:
				return give
			case <-ctx.Done():
				return func() {}
			}
		case <-ctx.Done():
			return func() {}
		}
	}
}

// AwaitEnd waits until the end of tenant's lease id on this node, if one is under way, is
// over: its workspace recorded, its sandbox destroyed, its end recorded. A receipt or a query
// of the lease's records waits for it, so what it says is whole. An end journaled before a
// restart is finished before the node starts: while it starts, one found in the journal is
// waited for too.
func (tb *leaseTable) AwaitEnd(ctx context.Context, tenant, id string) error {
	e := tb.ender.of(id)
	if e == nil {
		started := false
		select {
		case <-tb.started:
			started = true
		default:
		}
		if started && tb.startErr == nil {
			return nil // every journaled end was finished at start
		}
		journaled, err := tb.journaled(ctx, tenant, id)
		if err != nil || !journaled {
			return err
		}
		select {
		case <-tb.started:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the node to start, which finishes the end of lease %s: %w", id, ctx.Err())
		}
		if e = tb.ender.of(id); e == nil {
			if tb.startErr != nil {
				// The start failed before it finished the ends it found (or while it did): what
				// the lease's records would say is not whole, and not answering says so.
				return fmt.Errorf("the end of lease %s is not finished: the node did not start: %w", id, tb.startErr)
			}
			return nil
		}
	}
	if !e.Lease.ownedBy(tenant) {
		return nil
	}
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the end of lease %s: %w", id, ctx.Err())
	}
}

// journaled reports whether this node's journal holds an end of tenant's lease id.
func (tb *leaseTable) journaled(ctx context.Context, tenant, id string) (bool, error) {
	if tb.leases == nil { // a Manager with no store (an API's test) journals nothing
		return false, nil
	}
	all, err := tb.leases.Ending(ctx, tb.node)
	if err != nil {
		return false, fmt.Errorf("reading the journal of ends: %w", err)
	}
	for _, raw := range all {
		var e ending
		if json.Unmarshal(raw, &e) == nil && e.Lease.ID == id && e.Lease.ownedBy(tenant) {
			return true, nil
		}
	}
	return false, nil
}

// finishEnds finishes every end journaled for this node, as a restart finds them: each is
// revoked again (revoking what is revoked already asks nothing of Vault), its workspace read
// if its sandbox still runs, its sandbox destroyed and its end recorded. It runs before the
// node adopts or clears anything, which would otherwise destroy those sandboxes unread, or
// keep them.
func (tb *leaseTable) finishEnds(ctx context.Context) error {
	all, err := tb.leases.Ending(ctx, tb.node)
	if err != nil {
		return fmt.Errorf("reading the journal of ends: %w", err)
	}
	// Two ends of one lease can be journaled (a pause whose destroy failed, then the resumed
	// lease's own end): they run one after another, each in a round of its own.
	var later []*ending
	var ends []*ending
	for sandbox, raw := range all {
		e := &ending{}
		if err := json.Unmarshal(raw, e); err != nil || e.Lease.Sandbox.ID != sandbox {
			// Not this node's writing: the sandbox it names goes all the same.
			tb.log.Error("an unreadable end in the journal; its sandbox is destroyed", "sandbox", sandbox, "err", err)
			if derr := tb.runtime.Destroy(ctx, sandbox); derr != nil {
				return fmt.Errorf("destroying sandbox %s of an unreadable end: %w", sandbox, derr)
			}
			if derr := tb.leases.Ended(ctx, tb.node, sandbox); derr != nil {
				return derr
			}
			continue
		}
		e.Note = strings.TrimPrefix(e.Note+"; ", "; ") + "finished when the node started again"
		later = append(later, e)
	}
	var errs []error
	for len(later) > 0 {
		round := later
		ends, later = nil, nil
		for _, e := range round {
			if err := tb.ender.begin(e); err != nil {
				later = append(later, e) // its lease's other end runs in this round
				continue
			}
			tb.supply.reserve(tb.templates[e.Lease.Template])
			ends = append(ends, e)
		}
		if len(ends) == 0 {
			errs = append(errs, fmt.Errorf("%d journaled ends wait for ends of their leases that never came", len(later)))
			break
		}
		var wg sync.WaitGroup
		for _, e := range ends {
			wg.Add(1)
			tb.ender.run <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-tb.ender.run }()
				tb.revokeFor(ctx, e)
				tb.complete(e)
			}()
		}
		wg.Wait()
		for _, e := range ends {
			if e.err != nil {
				errs = append(errs, e.err)
			}
		}
	}
	if len(errs) > 0 {
		// Still journaled: the next start tries again.
		return fmt.Errorf("finishing the ends journaled before the restart: %w", errors.Join(errs...))
	}
	return nil
}
