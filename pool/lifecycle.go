package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/token"
)

// Renew extends tenant's lease id by ttl from now (zero: the template's default), capped by the
// template's maximum and by the task token's expiry: renewing past the token needs a fresh one.
func (tb *leaseTable) Renew(ctx context.Context, tenant, id string, ttl time.Duration) (Lease, error) {
	l, err := tb.Held(ctx, tenant, id)
	if err != nil {
		return Lease{}, err
	}
	t := tb.templates[l.Template]
	task, err := tb.verify(l.Token, l.Tenant)
	if err != nil {
		return Lease{}, fmt.Errorf("%w: the lease's task token no longer verifies (%v); lease again with a fresh token", ErrTokenRefused, err)
	}
	l.Expires = t.expiry(time.Now(), ttl, task.Expires)
	if err := tb.rebind(ctx, l, l.JTI, task); err != nil {
		return Lease{}, err
	}
	tb.event(ctx, l, audit.EventRenew, "expires "+l.Expires.UTC().Format(time.RFC3339))
	return l, nil
}

// SwapToken gives tenant's lease id a new task token for the same task (same sub): its scopes
// replace the old ones at once on this node's gateway and resolver (requests are checked per
// request, and tunnels the new scopes refuse are closed), and the lease's expiry is capped by
// the new token's.
func (tb *leaseTable) SwapToken(ctx context.Context, tenant, id, raw string) (Lease, error) {
	l, err := tb.Held(ctx, tenant, id)
	if err != nil {
		return Lease{}, err
	}
	task, err := tb.admit(raw, l.Tenant)
	if err != nil {
		return Lease{}, err
	}
	if task.ID != l.Task {
		return Lease{}, fmt.Errorf("%w: the new token is for task %q, the lease for %q", ErrTokenRefused, task.ID, l.Task)
	}
	oldJTI := l.JTI
	l.Token, l.JTI = raw, task.JTI
	l.Expires = earliest(l.Expires, task.Expires)
	if err := tb.rebind(ctx, l, oldJTI, task); err != nil {
		return Lease{}, err
	}
	reason := fmt.Sprintf("jti %s replaces %s", l.JTI, oldJTI)
	if r := tb.revocation(ctx, tb.revoke, l); r != "" {
		reason += "; " + r
	}
	tb.grantEvent(ctx, l, audit.EventTokenSwap, reason, task)
	return l, nil
}

// rebind stores l (held before under oldJTI) with its binding under task, and makes the binding
// visible here at once.
func (tb *leaseTable) rebind(ctx context.Context, l Lease, oldJTI string, task token.Task) error {
	b := bindingOf(l, task)
	var err error
	if b.Version, err = tb.leases.Rebind(ctx, l, oldJTI, b); err != nil {
		return err
	}
	tb.bindLocal(b)
	return nil
}

// Release ends tenant's lease id: unbind first, then revoke, and answer; the workspace's
// record and the sandbox's destroy follow, journaled (ender.go). A release asked for is carried
// out whether or not the caller waits for the answer: it runs on a context of its own from the
// start (see end).
func (tb *leaseTable) Release(ctx context.Context, tenant, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	l, err := tb.Held(ctx, tenant, id)
	if err != nil {
		return err
	}
	return tb.end(ctx, l, audit.EventRelease)
}

// teardownTimeout bounds how long ending a lease may take: unbinding, revoking what was minted
// for it and destroying its sandbox.
const teardownTimeout = 2 * time.Minute

// end ends l: unbind first, so nothing reaches the sandbox or its credentials any more, then
// revoke, and return; reading its workspace and destroying its sandbox follow in the ender.
// Once begun it runs to the end on a context of its own: a caller that goes away (a client that
// hangs up right after DELETE) must not leave an unbound lease whose credentials stay valid and
// whose sandbox lives on with nothing left to reap it. The outcome, failures included, is the
// lease's audit record.
func (tb *leaseTable) end(ctx context.Context, l Lease, event audit.Event) error {
	return tb.endAs(ctx, l, event, "", false)
}

// pauseEnd ends l's sandbox as end does, for a pause: what was minted for it is revoked, but
// the broker may mint for the lease again once it is resumed under a new binding. note says
// what the pause kept. It returns once the sandbox is destroyed and the pause recorded, so the
// pause's record comes before anything a resume records.
func (tb *leaseTable) pauseEnd(ctx context.Context, l Lease, note string) error {
	return tb.endAs(ctx, l, audit.EventPause, note, true)
}

// endAs is end for event (a pause revokes with Config.Revoke, every other end with
// Config.Release) with a note for the record; wait runs the end's second part in the caller.
// Of two ends of one lease at once (a release and a pause, a release and an expiry), the one
// whose unbind comes first ends it; the other does nothing more and fails with
// ErrLeaseNotFound (a release that finds the lease paused this way is answered by releasing
// the paused lease).
func (tb *leaseTable) endAs(ctx context.Context, l Lease, event audit.Event, note string, wait bool) error {
	if err := tb.cut(ctx, l, event); err != nil {
		return err
	}
	return tb.finish(ctx, l, event, note, wait)
}

// cut removes l's binding, here and in the store, which announces it, and journals l's end
// (for event) in the same step: the gateway closes the lease's connections and recognises its
// sandbox no more. It is the first step of every end of a lease, and the one two ends at once
// race for: ErrLeaseNotFound, having changed nothing, when l ended already or runs in another
// sandbox now. A pause that keeps memory takes it before it stops the sandbox, whose address
// the engine gives back then (finish, or bindAgain, then follows).
func (tb *leaseTable) cut(ctx context.Context, l Lease, event audit.Event) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	e := &ending{Lease: l, Event: event, Began: time.Now()}
	// The end needs no task token, and the journal keeps it no longer than the end lasts: the
	// token is left out, as it is of everything but the live lease's record.
	e.Lease.Token = ""
	journal, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := tb.ender.begin(e); err != nil {
		return err
	}
	tb.unbindLocal(l)
	if err := tb.leases.BeginEnd(ctx, l, journal); err != nil && !tb.journaledAnyway(ctx, l, err) {
		tb.ender.over(e)
		return err
	}
	// Until it is destroyed, the sandbox counts against max_total and the memory budget as
	// one pending for a lease does.
	tb.supply.reserve(tb.templates[l.Template])
	if tb.cutExecs != nil {
		tb.cutExecs(l.ID)
	}
	if c, ok := tb.binder.(Cutter); ok && l.Node == tb.node {
		c.Cut(ctx, l.Sandbox.Addr)
	}
	return nil
}

// journaledAnyway reports whether the store journaled l's end although BeginEnd failed with
// err: an answer lost on its way back (a timeout, a dropped connection) after the store had
// unbound the lease. Such an end must go on, here and now, or the sandbox would run on unbound
// and unended until the node restarts, and a retried release would find no lease to end.
func (tb *leaseTable) journaledAnyway(ctx context.Context, l Lease, err error) bool {
	if errors.Is(err, ErrLeaseNotFound) {
		return false // the store said no, having changed nothing
	}
	all, jerr := tb.leases.Ending(ctx, tb.node)
	if jerr != nil {
		return false
	}
	var e ending
	return json.Unmarshal(all[l.Sandbox.ID], &e) == nil && e.Lease.ID == l.ID
}

// uncut undoes cut's journal for l, whose end did not come (a pause that could not keep its
// state bound the lease again): its sandbox is the lease's again.
func (tb *leaseTable) uncut(ctx context.Context, l Lease) error {
	e := tb.ender.of(l.ID)
	if e == nil {
		return fmt.Errorf("%w: lease %s has no end under way to undo", ErrLeaseState, l.ID)
	}
	if err := tb.leases.Ended(ctx, tb.node, l.Sandbox.ID); err != nil {
		return err
	}
	tb.supply.unclaim(ctx, tb.templates[l.Template], nil)
	tb.ender.over(e)
	return nil
}

// finish ends l, which cut unbound, as endAs says: its revocation now, the rest in the ender
// (or here, with wait). event and note are what the record says (a pause that keeps memory,
// cut as a pause, may end as a release).
func (tb *leaseTable) finish(ctx context.Context, l Lease, event audit.Event, note string, wait bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	e := tb.ender.of(l.ID)
	if e == nil || e.Lease.Sandbox.ID != l.Sandbox.ID {
		return fmt.Errorf("%w: lease %s has no end under way", ErrLeaseState, l.ID)
	}
	e.Event, e.Note = event, note
	tb.revokeFor(ctx, e)
	if wait {
		tb.complete(e)
		return e.err
	}
	tb.ender.start(func() { tb.complete(e) })
	return nil
}

// revokeFor revokes what was minted for e's lease (Config.Release, or Revoke for a pause),
// keeping what failed for the record.
func (tb *leaseTable) revokeFor(ctx context.Context, e *ending) {
	revoke := tb.release
	if e.revokes() {
		revoke = tb.revoke
	}
	if r := tb.revocation(ctx, revoke, e.Lease); r != "" {
		e.problems = append(e.problems, r)
	}
}

// complete is the second part of e's end, on a context of its own: the lease's processes stop
// and its workspace is recorded, its caches written back (not at a pause), its sandbox
// destroyed (at a lower priority than the refill's creations), its end recorded and signed,
// and its journal entry removed. A destroy that fails leaves the entry, which the node's next
// start finishes.
func (tb *leaseTable) complete(e *ending) {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	defer tb.ender.over(e)
	l := e.Lease
	tb.ended(ctx, l)
	if e.Event != audit.EventPause {
		tb.caches.writeCaches(ctx, l)
	}
	var problems []string
	if e.Note != "" {
		problems = append(problems, e.Note)
	}
	problems = append(problems, e.problems...)
	give := tb.ender.slots.take(ctx)
	err := tb.runtime.Destroy(ctx, l.Sandbox.ID)
	give()
	if err != nil {
		tb.log.Error("destroying sandbox", "lease", l.ID, "sandbox", l.Sandbox.ID, "err", err)
		problems = append(problems, "destroying the sandbox failed: "+err.Error())
	} else {
		tb.supply.unclaim(ctx, tb.templates[l.Template], nil)
	}
	e.err = err
	tb.event(ctx, l, e.Event, strings.Join(problems, "; "))
	// Everything the lease did is signed as soon as it ends, so its receipt is covered at once.
	if cp, ok := tb.audit.(audit.Checkpointer); ok {
		if _, cerr := cp.Checkpoint(ctx); cerr != nil && !errors.Is(cerr, audit.ErrNoSigner) {
			tb.log.Error("audit checkpoint at lease end", "lease", l.ID, "err", cerr)
		}
	}
	// Only now, with the end recorded and signed, does the journal let it go: a node that stops
	// before this finishes the end again at its start (recording it twice at worst), where one
	// that had dropped the entry first would leave the lease ended with no record of its end.
	if err == nil {
		if jerr := tb.leases.Ended(ctx, tb.node, l.Sandbox.ID); jerr != nil {
			tb.log.Error("removing a finished end from the journal", "lease", l.ID, "sandbox", l.Sandbox.ID, "err", jerr)
		}
	}
	tb.supply.kick(l.Template)
}

// revoke calls f (Config.Release or Revoke) for l's per-task material, returning a reason for
// the audit record when it fails (the lease ends regardless; what could not be revoked now the
// broker retries, and it expires with the lease).
func (tb *leaseTable) revocation(ctx context.Context, f func(context.Context, string) error, l Lease) string {
	if f == nil {
		return ""
	}
	if err := f(ctx, l.ID); err != nil {
		tb.log.Error("revoking per-task credentials", "lease", l.ID, "err", err)
		return "revocation failed: " + err.Error()
	}
	return ""
}

func (tb *leaseTable) reap(ctx context.Context) {
	ls, err := tb.leases.Expired(ctx, tb.node, time.Now())
	if err != nil {
		tb.log.Error("reaper", "err", err)
		return
	}
	for _, l := range ls {
		tb.metrics.reaped()
		// Not found: released or paused since it was listed.
		if err := tb.end(ctx, l, audit.EventExpiry); err != nil && !errors.Is(err, ErrLeaseNotFound) {
			tb.log.Error("reaping expired lease", "lease", l.ID, "err", err)
		}
	}
}
