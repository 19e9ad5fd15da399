package pool

import (
	"context"
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

// Release ends tenant's lease id: unbind first, then destroy the sandbox, then refill. A release
// asked for is carried out whether or not the caller waits for the answer: it runs on a context
// of its own from the start (see end).
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
// revoke and destroy. Once begun it runs to the end on a context of its own: a caller that goes
// away (a client that hangs up right after DELETE) must not leave an unbound lease whose
// credentials stay valid and whose sandbox lives on with nothing left to reap it. The outcome,
// failures included, is the lease's audit record.
func (tb *leaseTable) end(ctx context.Context, l Lease, event audit.Event) error {
	return tb.endAs(ctx, l, event, tb.release, "")
}

// pauseEnd ends l's sandbox as end does, for a pause: what was minted for it is revoked, but
// the broker may mint for the lease again once it is resumed under a new binding. note says
// what the pause kept.
func (tb *leaseTable) pauseEnd(ctx context.Context, l Lease, note string) error {
	return tb.endAs(ctx, l, audit.EventPause, tb.revoke, note)
}

// endAs is end with the revocation revoke (Config.Release or Revoke) and a note for the
// record. Of two ends of one lease at once (a release and a pause, a release and an expiry),
// the one whose unbind comes first ends it; the other does nothing more and fails with
// ErrLeaseNotFound (a release that finds the lease paused this way is answered by releasing
// the paused lease).
func (tb *leaseTable) endAs(ctx context.Context, l Lease, event audit.Event, revoke func(context.Context, string) error, note string) error {
	if err := tb.cut(ctx, l); err != nil {
		return err
	}
	return tb.finish(ctx, l, event, revoke, note)
}

// cut removes l's binding, here and in the store, which announces it: the gateway closes the
// lease's connections and recognises its sandbox no more. It is the first step of every end of
// a lease, and the one two ends at once race for: ErrLeaseNotFound, having changed nothing,
// when l ended already or runs in another sandbox now. A pause that keeps memory takes it
// before it stops the sandbox, whose address the engine gives back then (finish, or bind, then
// follows).
func (tb *leaseTable) cut(ctx context.Context, l Lease) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	tb.unbindLocal(l)
	if err := tb.leases.Unbind(ctx, l); err != nil {
		return err
	}
	if c, ok := tb.binder.(Cutter); ok && l.Node == tb.node {
		c.Cut(ctx, l.Sandbox.Addr)
	}
	return nil
}

// finish ends l, which cut has unbound, as endAs says.
func (tb *leaseTable) finish(ctx context.Context, l Lease, event audit.Event, revoke func(context.Context, string) error, note string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	tb.ended(ctx, l)
	if event != audit.EventPause {
		tb.caches.writeCaches(ctx, l)
	}
	var problems []string
	if note != "" {
		problems = append(problems, note)
	}
	if r := tb.revocation(ctx, revoke, l); r != "" {
		problems = append(problems, r)
	}
	err := tb.runtime.Destroy(ctx, l.Sandbox.ID)
	if err != nil {
		tb.log.Error("destroying sandbox", "lease", l.ID, "sandbox", l.Sandbox.ID, "err", err)
		problems = append(problems, "destroying the sandbox failed: "+err.Error())
	}
	tb.event(ctx, l, event, strings.Join(problems, "; "))
	// Everything the lease did is signed as soon as it ends, so its receipt is covered at once.
	if cp, ok := tb.audit.(audit.Checkpointer); ok {
		if _, cerr := cp.Checkpoint(ctx); cerr != nil && !errors.Is(cerr, audit.ErrNoSigner) {
			tb.log.Error("audit checkpoint at lease end", "lease", l.ID, "err", cerr)
		}
	}
	tb.supply.kick(l.Template)
	return err
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
