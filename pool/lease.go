package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/token"
)

// LeaseRequest asks for a sandbox for a task.
type LeaseRequest struct {
	Tenant   string
	Template string
	Token    string
	TTL      time.Duration
	// Key is the hex SHA-256 of the API key asking (see Lease.Key).
	Key string
	// Env and Metadata are the lease's (see Lease), checked by CheckEnv and CheckMetadata.
	Env, Metadata map[string]string
	// From is a snapshot of the tenant's (an ID or a name) to restore the workspace from before
	// the lease is returned; Template may then be empty (the snapshot's is taken).
	From string
	// NoCaches starts the lease with its template's tenant caches empty; WriteCaches writes
	// them back at its end, for the tenant's next leases of the template (cache.go).
	NoCaches, WriteCaches bool
}

// Lease verifies the task token, claims a warm sandbox and binds it. The lease is returned only
// once this node's gateway and resolver recognise the sandbox. It makes no Docker or Vault call,
// unless it starts from a snapshot: then the snapshot is unpacked in the sandbox (and its data
// key unwrapped) before the sandbox is bound.
func (tb *leaseTable) Lease(ctx context.Context, req LeaseRequest) (Lease, error) {
	var opts grantOptions
	if req.From != "" {
		if tb.from == nil {
			return Lease{}, ErrNoSnapshots
		}
		m, restore, err := tb.from(ctx, req.Tenant, req.From)
		if err != nil {
			return Lease{}, err
		}
		if req.Template == "" {
			req.Template = m.Template
		}
		if req.Template != m.Template {
			return Lease{}, fmt.Errorf("%w: snapshot %s is of template %s, not %s", ErrBadRequest, m.ID, m.Template, req.Template)
		}
		req.From, opts.restore = m.ID, restore
	}
	return tb.grant(ctx, req, opts)
}

// grantOptions are what a lease from a snapshot and a resume add to a lease.
type grantOptions struct {
	// id is the lease's id (a resumed lease keeps its own); empty: a new one.
	id string
	// task is the task the token must be for (a resumed lease's); empty: any.
	task string
	// event is the lease's first record: EventBind unless set (EventResume).
	event audit.Event
	// restore fills the claimed sandbox before it is bound; its failure destroys the sandbox
	// and refuses the lease.
	restore func(ctx context.Context, t Template, sb Sandbox) (Restored, error)
}

// grant is Lease with opts.
func (tb *leaseTable) grant(ctx context.Context, req LeaseRequest, opts grantOptions) (Lease, error) {
	t, ok := tb.templates[req.Template]
	if !ok {
		return Lease{}, fmt.Errorf("%w %q", ErrUnknownTemplate, req.Template)
	}
	if err := CheckEnv(req.Env); err != nil {
		return Lease{}, err
	}
	if err := CheckMetadata(req.Metadata); err != nil {
		return Lease{}, err
	}
	if err := tb.caches.checkCaches(t, req); err != nil {
		return Lease{}, err
	}
	task, err := tb.admit(req.Token, req.Tenant)
	if err != nil {
		return Lease{}, err
	}
	if opts.task != "" && task.ID != opts.task {
		return Lease{}, fmt.Errorf("%w: the token is for task %q, the paused lease for %q", ErrTokenRefused, task.ID, opts.task)
	}
	if err := tb.awaitStart(ctx); err != nil {
		return Lease{}, err
	}
	now := time.Now()
	expires := t.expiry(now, req.TTL, task.Expires)
	sb, start, err := tb.supply.claim(ctx, t, opts.restore != nil)
	if err != nil {
		return Lease{}, err
	}
	defer tb.supply.unclaim(ctx, t, nil) // bound, or destroyed: either way no longer pending
	id := opts.id
	if id == "" {
		id = "l-" + randomID()
	}
	l := Lease{
		ID: id, Tenant: req.Tenant, Task: task.ID, JTI: task.JTI, Template: t.Name,
		Node: sb.Node, Sandbox: sb, Created: now, Expires: expires, Token: req.Token, Start: start, Key: req.Key,
		Env: req.Env, Metadata: req.Metadata, WriteCaches: req.WriteCaches,
	}
	reason := string(l.Start)
	if opts.restore != nil {
		r, err := opts.restore(ctx, t, sb)
		if err != nil {
			// Nothing reached the sandbox but the snapshot's files: it is destroyed, never
			// reused. The refusal is recorded: a snapshot refused on its way back may be one
			// altered in the store, which the tenant's security team should see too.
			tb.runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
			err = fmt.Errorf("restoring snapshot %s: %w", req.From, err)
			if aerr := tb.audit.Write(ctx, audit.Record{Kind: audit.KindFile, Event: EventRestore, Node: tb.node, Tenant: l.Tenant, Lease: l.ID,
				Task: l.Task, Sandbox: sb.ID, SHA256: req.From, Decision: audit.Deny, Reason: err.Error()}); aerr != nil {
				tb.log.Error("audit write failed", "err", aerr)
			}
			return Lease{}, err
		}
		if r.sandbox != nil {
			sb, l.Sandbox = *r.sandbox, *r.sandbox
		}
		l.Restored = &r
		reason += fmt.Sprintf("; restored snapshot %s (%d files, %d bytes", r.Snapshot, r.Files, r.Size)
		if r.Kept == apitype.KeptMemory {
			reason += ", a checkpoint: its processes came back with their memory"
		}
		reason += fmt.Sprintf(") in %s", r.Took.Round(time.Millisecond))
	}
	// After a snapshot, which they overlay. A resumed lease has its caches in what its pause
	// kept.
	if opts.event != audit.EventResume {
		note, err := tb.caches.readCaches(ctx, l, req.NoCaches)
		if err != nil {
			tb.runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
			return Lease{}, err
		}
		reason += note
	}
	if opts.event == audit.EventResume {
		// A resumed lease keeps its id, under which the broker keeps what it mints: what this
		// node's broker holds for it now was minted before the resume (a request of the paused
		// sandbox whose mint landed after the pause's revocation, before the gateway cut it),
		// and must not serve the resumed lease. Nothing held, no call to Vault.
		if r := tb.revocation(ctx, tb.revoke, l); r != "" {
			reason += "; " + r
		}
	}
	b := bindingOf(l, task)
	if b.Version, err = tb.leases.Bind(ctx, l, b); err != nil {
		// The claimed sandbox was never visible to the task: destroy it rather than reuse it.
		tb.runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
		return Lease{}, err
	}
	tb.bindLocal(b)
	event := audit.EventBind
	if opts.event != "" {
		event = opts.event
	}
	tb.grantEvent(ctx, l, event, reason, task)
	tb.metrics.observeLease(time.Since(now))
	return l, nil
}

// expiry is when a lease of t asked for ttl from now ends: ttl (zero: the template's default),
// capped by the template's maximum and by the token's expiry, since a lease never outlives its
// token.
func (t Template) expiry(now time.Time, ttl time.Duration, token time.Time) time.Time {
	if ttl <= 0 {
		ttl = t.DefaultTTL
	}
	if t.MaxTTL > 0 && ttl > t.MaxTTL {
		ttl = t.MaxTTL
	}
	return earliest(now.Add(ttl), token)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// admit verifies raw for tenant and applies deployment policy: the one check every use of a
// task token passes, whether it binds a lease, replaces a lease's token or is presented to the
// gateway by a client outside the pool.
func (tb *leaseTable) admit(raw, tenant string) (token.Task, error) {
	task, err := tb.verify(raw, tenant)
	if err != nil {
		return token.Task{}, fmt.Errorf("%w: %v", ErrTokenRefused, err)
	}
	if tb.checkTask != nil {
		if err := tb.checkTask(task); err != nil {
			return token.Task{}, fmt.Errorf("%w: %v", ErrTokenRefused, err)
		}
	}
	return task, nil
}

// bindingOf is what this lease's node tells its gateway and resolver about l: the sandbox's
// address and the task's scopes and budget, until l expires. The store gives it its version.
func bindingOf(l Lease, task token.Task) binding.Binding {
	return binding.Binding{
		Lease: l.ID, Node: l.Node, Addr: l.Sandbox.Addr, Task: l.Task, Tenant: l.Tenant, Sandbox: l.Sandbox.ID,
		Template: l.Template, Expires: l.Expires, Scopes: task.Scopes, Budget: task.Budget,
	}
}

// bindAgain binds l again, which cut unbound and whose sandbox runs on (a pause that stopped it
// and could not keep what it took brought it back): its token is admitted again, as at its
// grant, and its sandbox must answer its health probe. why is the record's reason.
func (tb *leaseTable) bindAgain(ctx context.Context, l Lease, why string) error {
	task, err := tb.admit(l.Token, l.Tenant)
	if err != nil {
		return err
	}
	if err := tb.runtime.Check(ctx, l.Sandbox); err != nil {
		return fmt.Errorf("its sandbox does not answer: %w", err)
	}
	b := bindingOf(l, task)
	if b.Version, err = tb.leases.Bind(ctx, l, b); err != nil {
		return err
	}
	tb.bindLocal(b)
	// The end cut journaled did not come. Should the node stop before this, the next start
	// finishes that end: the lease is bound then, and Reconcile ends it for its sandbox gone
	// (an end, never a sandbox left running unbound).
	if err := tb.uncut(ctx, l); err != nil {
		tb.log.Error("undoing the journaled end of a lease bound again", "lease", l.ID, "err", err)
	}
	tb.grantEvent(ctx, l, audit.EventBind, why, task)
	return nil
}

// bindLocal makes b visible at once to this node's gateway and resolver. A binding of another
// node's sandbox is not: its address means something else here, and that node's cache finds
// the binding in the store on its first lookup.
func (tb *leaseTable) bindLocal(b binding.Binding) {
	if b.Node == tb.node {
		tb.binder.Put(b)
	}
}

func (tb *leaseTable) unbindLocal(l Lease) {
	if l.Node == tb.node {
		tb.binder.Delete(l.Sandbox.Addr)
	}
}

// grantEvent records a lease event that grants the task's scopes (bind, token swap), with the
// sandbox's template and runtime.
func (tb *leaseTable) grantEvent(ctx context.Context, l Lease, event audit.Event, reason string, task token.Task) {
	rec := audit.Record{
		Kind: audit.KindLease, Event: event, Node: tb.node, Tenant: l.Tenant, Lease: l.ID,
		Task: l.Task, Sandbox: l.Sandbox.ID, Source: l.Sandbox.Addr.String(), Reason: reason,
		Template: l.Template, Runtime: tb.templates[l.Template].EngineRuntime(),
	}
	for _, sc := range task.Scopes {
		rec.Scopes = append(rec.Scopes, sc.String())
	}
	if err := tb.audit.Write(ctx, rec); err != nil {
		tb.log.Error("audit write failed", "err", err)
	}
}

func randomID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// AdmitBearer decides on a task token that a client outside the pool presents to this node's
// gateway, exactly as a lease would: verified for the tenant it names (its issuer must be
// allowed to speak for it), under the same deployment policy, and bound to one use of its jti,
// which no lease may then take and which no other node's gateway may use (the token must not
// already bind a lease either). Safe for concurrent use.
func (tb *leaseTable) AdmitBearer(ctx context.Context, raw string) (token.Task, error) {
	task, err := tb.admit(raw, "")
	if err != nil {
		return token.Task{}, err
	}
	if err := tb.leases.ClaimJTI(ctx, task.JTI, BearerHolder(tb.node), task.Expires); err != nil {
		if errors.Is(err, ErrJTIInUse) {
			return token.Task{}, fmt.Errorf("%w: %v", ErrTokenRefused, err)
		}
		// The store did not answer: that is no verdict on the token.
		return token.Task{}, fmt.Errorf("%w: claiming the token's id: %v", binding.ErrUnavailable, err)
	}
	return task, nil
}

// BearerHolder is what holds a token id while a node's gateway serves it to a client outside
// the pool.
func BearerHolder(node string) string { return "bearer:" + node }
