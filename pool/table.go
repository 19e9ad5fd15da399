package pool

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/snapshot"
	"github.com/airlock-dev/airlock/token"
)

// leaseTable is one node's leases: it grants them (lease.go: the token admitted, a sandbox from
// the supply, the binding stored and made visible here), renews them, swaps their tokens, ends
// them on release or expiry (lifecycle.go), settles what an earlier run left (reconcile.go), and
// writes their lease events. It holds no lock of its own: the store is the table, and what
// happens at the end of a lease inside its sandbox is ended's.
type leaseTable struct {
	node      string
	api       string // this node's API address as other nodes reach it: with it, the node heartbeats
	templates map[string]Template
	leases    Leases
	nodes     NodeRegistry
	binder    Binder
	audit     audit.Sink
	runtime   Runtime
	supply    *supply
	verify    func(raw, tenant string) (token.Task, error)
	checkTask func(t token.Task) error
	// release and revoke are Config.Release and Config.Revoke.
	release, revoke func(ctx context.Context, lease string) error
	// ended is what a lease's end does inside its sandbox, after unbinding and before revoking
	// and destroying: its processes stop and its workspace is recorded (sandboxOps.ended).
	ended func(ctx context.Context, l Lease)
	// cutExecs ends the commands under way in a lease as its end begins (sandboxOps.cutExecs).
	cutExecs func(id string)
	// recordBefore records a lease's workspace ahead of its end (sandboxOps.recordBefore).
	recordBefore func(ctx context.Context, l Lease) (undo func())
	// from finds tenant's snapshot ref for a lease from it, with what restores it in a claimed
	// sandbox (keeper.from); nil when the node keeps no snapshots.
	from func(ctx context.Context, tenant, ref string) (snapshot.Manifest, func(context.Context, Template, Sandbox) (Restored, error), error)
	// caches restores a lease's caches before it is bound and writes them back at its end
	// (the keeper, cache.go).
	caches leaseCaches
	// ender runs the second part of each lease's end (ender.go).
	ender *ender
	// started is closed once Run has made the store and the runtime agree (Cleanup or
	// Reconcile); startErr says why that failed. A lease waits for it: a lease granted before
	// would be dropped by the start's own sweep (its record unbound, its sandbox destroyed).
	started  chan struct{}
	startErr error
	// startWaiters counts the calls waiting for started (a step a test can see).
	startWaiters atomic.Int32
	log          *slog.Logger
	metrics      *Metrics // nil until NewMetrics
}

// Get returns tenant's lease id.
func (tb *leaseTable) Get(ctx context.Context, tenant, id string) (Lease, error) {
	l, err := tb.leases.GetLease(ctx, id)
	if err != nil {
		return Lease{}, err
	}
	if !l.ownedBy(tenant) {
		// Say "not found" to other tenants: a lease id is not theirs to probe.
		return Lease{}, fmt.Errorf("%w: %s", ErrLeaseNotFound, id)
	}
	return l, nil
}

// Held returns tenant's lease id if this node holds it: everything that acts on a lease (its
// sandbox, its credentials, its binding) happens on the node that holds it, whose engine runs the
// sandbox and whose broker minted for it. Another node's lease fails with ErrNotOwner, so no
// request, however it got here, can act on a lease from the wrong node.
func (tb *leaseTable) Held(ctx context.Context, tenant, id string) (Lease, error) {
	l, err := tb.Get(ctx, tenant, id)
	if err != nil {
		return Lease{}, err
	}
	if l.Node != tb.node {
		return Lease{}, fmt.Errorf("%w: lease %s is on node %s, not %s", ErrNotOwner, id, l.Node, tb.node)
	}
	return l, nil
}

// List returns tenant's leases on this node and every other live one.
func (tb *leaseTable) List(ctx context.Context, tenant string) ([]Lease, error) {
	nodes, err := tb.nodes.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	nodes[tb.node] = ""
	var out []Lease
	for node := range nodes {
		ls, err := tb.leases.ListLeases(ctx, node)
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			if l.ownedBy(tenant) {
				out = append(out, l)
			}
		}
	}
	return out, nil
}

// Node is the name of this node.
func (tb *leaseTable) Node() string { return tb.node }

// NodeAPI returns the API address of a live node.
func (tb *leaseTable) NodeAPI(ctx context.Context, node string) (string, error) {
	nodes, err := tb.nodes.Nodes(ctx)
	if err != nil {
		return "", err
	}
	api, ok := nodes[node]
	if !ok {
		return "", fmt.Errorf("node %s, which holds this lease, is not running", node)
	}
	return api, nil
}

func (tb *leaseTable) heartbeat(ctx context.Context) {
	if tb.api == "" {
		return
	}
	if err := tb.nodes.Heartbeat(ctx, tb.node, tb.api, 3*heartbeatEvery); err != nil {
		tb.log.Error("heartbeat", "err", err)
	}
}

func (tb *leaseTable) event(ctx context.Context, l Lease, event audit.Event, reason string) {
	err := tb.audit.Write(ctx, audit.Record{
		Kind: audit.KindLease, Event: event, Node: tb.node, Tenant: l.Tenant, Lease: l.ID,
		Task: l.Task, Sandbox: l.Sandbox.ID, Source: l.Sandbox.Addr.String(), Reason: reason,
	})
	if err != nil {
		tb.log.Error("audit write failed", "err", err)
	}
}
