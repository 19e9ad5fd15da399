package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/token"
)

// Binder makes a binding visible to this node's gateway and resolver at once; *binding.Cache
// meets it.
type Binder interface {
	Put(b binding.Binding)
	Delete(addr netip.Addr)
	// Lookup returns addr's live binding, binding.ErrUnknown when there is none.
	Lookup(ctx context.Context, addr netip.Addr) (binding.Binding, error)
}

// Cutter is a Binder that also closes at once what a sandbox's address holds through this
// node's gateway once its lease is unbound (the gateway's Ended): the lease's connections are
// then cut, and recorded as cut, before its sandbox goes.
type Cutter interface {
	Cut(ctx context.Context, addr netip.Addr)
}

// Config is what a Manager needs.
type Config struct {
	Node      string
	Templates []Template
	Runtime   Runtime
	Store     Store
	Binder    Binder
	Audit     audit.Sink
	// Verify checks a task token used on behalf of a tenant ("" for a client outside the
	// pool; see token.Verifier.VerifyFor); CheckTask then applies deployment policy (for
	// example that every credential a scope names is in the catalog and may go to that host).
	// Leases, token swaps and the gateway's clients outside the pool (AdmitBearer) all pass
	// through both.
	Verify    func(raw, tenant string) (token.Task, error)
	CheckTask func(t token.Task) error
	// RefillParallel bounds the refill's concurrent sandbox creations; zero means
	// DefaultRefillParallel.
	RefillParallel int
	// MemoryBudgetMB, when set, bounds the memory limits of all this node's sandboxes together
	// (warm, leased and being made, of every template): no sandbox is made past it, by the
	// refill or for a lease.
	MemoryBudgetMB int64
	// HealthEvery is how often warm sandboxes are checked; zero means 30s.
	HealthEvery time.Duration
	// Release, when set, revokes what was minted for a lease's task (per-task Vault material)
	// and mints nothing for it again; it is called when the lease ends, between unbinding and
	// destroying the sandbox. Revoke revokes it and lets the lease go on: a token swap calls it,
	// and material is minted again on next use, under the new scopes.
	Release, Revoke func(ctx context.Context, lease string) error
	// API is this node's API address as other nodes reach it; with it the node heartbeats, and
	// leases may take other live nodes' warm sandboxes when its own pool is empty.
	API string
	// KeepOnStop keeps the node's sandboxes and records when Run ends, and makes Run adopt them
	// at start (Reconcile) instead of clearing everything (Cleanup): a production node restarts
	// without ending its leases.
	KeepOnStop bool
	// OutputHead is how many bytes of each command's stdout and stderr its exec record keeps
	// (zero: none; sizes and hashes are always recorded). Redact, when set, is the one
	// redaction step each head passes first: every credential value the node holds for the
	// lease is replaced.
	OutputHead int
	Redact     func(lease, text string) string
	// Snapshots keeps snapshots and paused leases (package snapshot's Catalog); nil: this node
	// keeps none, and snapshots, leases from them and pauses are refused saying so.
	Snapshots Snapshots
	// Scratch is a folder of the node's own where a pause's checkpoint of a sandbox (its memory,
	// in the clear) is written before it is kept, encrypted, in Snapshots, and unpacked before a
	// resume restores it, each removed at once; empty: the system's temporary folder.
	Scratch string
	// Tenants lists the tenants whose paused leases this node expires (those of its API keys).
	Tenants func() []string
	Logger  *slog.Logger
}

// DefaultRefillParallel is how many sandboxes the refill makes at once unless told: the most
// creates per second measured on the Docker engine of a 2-core machine, whose engine work
// overlaps up to about this many (docs/bench-pool.md).
const DefaultRefillParallel = 4

// Manager runs one node's pool. It is three parts, each owning its fields and its locks, which
// it wires together and runs:
//
//   - the warm supply (supply): per template, the warm set's refill, sizing, health checks and
//     image, and the claim of a sandbox for a lease;
//   - the lease table (leaseTable): granting, renewing, swapping the token of and ending leases,
//     their bindings and events, the reaper and the settlement of a restart;
//   - the operations in a leased sandbox (sandboxOps): commands, background processes, files
//     and the ledger that records them.
//
// The lease table takes sandboxes from the supply; the operations act on leases the table says
// this node holds, and the table's end of a lease calls theirs. Safe for concurrent use.
type Manager struct {
	*supply
	*leaseTable
	*sandboxOps
	*keeper
	cfg Config
}

// New validates cfg and returns a Manager; Run must be called to warm and reap.
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RefillParallel == 0 {
		cfg.RefillParallel = DefaultRefillParallel
	}
	if cfg.HealthEvery == 0 {
		cfg.HealthEvery = 30 * time.Second
	}
	seen := map[string]bool{}
	for _, t := range cfg.Templates {
		if errs := t.Validate(); len(errs) > 0 {
			return nil, fmt.Errorf("template %q: %w", t.Name, errors.Join(errs...))
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("template %q: defined twice", t.Name)
		}
		seen[t.Name] = true
	}
	if cfg.MemoryBudgetMB > 0 {
		var floor int64
		for _, t := range cfg.Templates {
			floor += int64(t.MinWarm) * t.MemoryMB
		}
		if floor > cfg.MemoryBudgetMB {
			return nil, fmt.Errorf("the templates' min_warm sandboxes have %d MiB of memory limits together, more than the node's memory budget of %d MiB: "+
				"lower min_warm or memory_mb, or raise pool.memory_budget_mb", floor, cfg.MemoryBudgetMB)
		}
	}
	// What every backend's commands share (a marker, the timeout and the kill) is applied here,
	// once, over whichever runtime this is.
	backend := cfg.Runtime
	cfg.Runtime = WithPolicy(cfg.Runtime)
	s := newSupply(cfg)
	tb := &leaseTable{
		node: cfg.Node, api: cfg.API, templates: s.templates, leases: cfg.Store, nodes: cfg.Store, binder: cfg.Binder,
		audit: cfg.Audit, runtime: cfg.Runtime, supply: s, verify: cfg.Verify, checkTask: cfg.CheckTask,
		release: cfg.Release, revoke: cfg.Revoke, started: make(chan struct{}), log: cfg.Logger,
		ender: newEnder(engineSlots(s.sem)),
	}
	op := &sandboxOps{
		node: cfg.Node, templates: s.templates, runtime: cfg.Runtime, audit: cfg.Audit, table: tb,
		outputHead: cfg.OutputHead, redact: cfg.Redact, log: cfg.Logger,
		procs: map[string]*leaseProcesses{}, uploads: map[string]map[string]FileInfo{},
	}
	tb.ended, tb.recordBefore, tb.cutExecs = op.ended, op.recordBefore, op.cutExecs
	k := &keeper{node: cfg.Node, templates: s.templates, runtime: cfg.Runtime, checkpointer: backend, audit: cfg.Audit, table: tb, supply: s,
		catalog: cfg.Snapshots, scratch: cfg.Scratch, checkpoints: make(checkpoints, maxCheckpoints), ops: op, log: cfg.Logger,
		claim: func(ctx context.Context, name, holder string, until time.Time) error {
			return cfg.Store.ClaimJTI(ctx, name, holder, until)
		},
		unclaim: func(ctx context.Context, name, holder string) error { return cfg.Store.Unclaim(ctx, name, holder) }}
	tb.caches = k
	if cfg.Scratch != "" {
		// What an earlier run left there (it stopped mid-pause) is sandbox memory in the clear,
		// which nothing will store or restore now.
		if err := os.RemoveAll(cfg.Scratch); err != nil {
			return nil, fmt.Errorf("pool: clearing the checkpoints' folder %s: %w", cfg.Scratch, err)
		}
	}
	if cfg.Snapshots != nil {
		tb.from = k.from
	}
	return &Manager{supply: s, leaseTable: tb, sandboxOps: op, keeper: k, cfg: cfg}, nil
}

// Run settles what an earlier run of this node left behind (the ends it journaled, then
// Reconcile with KeepOnStop, else Cleanup), warms every template and keeps the pools full, healthy and reaped until ctx ends;
// then, without KeepOnStop, it destroys this node's sandboxes.
func (m *Manager) Run(ctx context.Context) error {
	// Ends an earlier run left under way first: their sandboxes, which no lease or warm set
	// refers to, would be destroyed unread by either sweep.
	if err := m.finishEnds(ctx); err != nil {
		m.startFailed(err)
		return err
	}
	if m.cfg.KeepOnStop {
		if err := m.Reconcile(ctx); err != nil {
			m.startFailed(err)
			return err
		}
	} else {
		if err := m.Cleanup(ctx); err != nil {
			m.startFailed(err)
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := m.Cleanup(cctx); err != nil {
				m.cfg.Logger.Error("cleanup at stop", "err", err)
			}
		}()
	}
	// At stop, before the sweep: the ends under way finish (their own contexts bound them), and
	// ends begun from now on run in their callers.
	defer m.ender.drain()
	close(m.started)
	m.refreshImages(ctx)
	for _, name := range m.names {
		m.refill <- name
	}
	reap := time.NewTicker(time.Second)
	defer reap.Stop()
	health := time.NewTicker(m.cfg.HealthEvery)
	defer health.Stop()
	beat := time.NewTicker(heartbeatEvery)
	defer beat.Stop()
	paused := time.NewTicker(pausedEvery)
	defer paused.Stop()
	m.heartbeat(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case name := <-m.refill:
			if m.startFill(name) {
				wg.Add(1)
				go func() { defer wg.Done(); m.fillAll(ctx, name) }()
			}
		case <-beat.C:
			m.heartbeat(ctx)
		case <-paused.C:
			// Off the loop: it lists the store of snapshots, which may be remote.
			if m.cfg.Tenants != nil && m.reapingPaused.CompareAndSwap(false, true) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer m.reapingPaused.Store(false)
					m.reapPaused(ctx, m.cfg.Tenants())
				}()
			}
		case <-health.C:
			wg.Add(1)
			go func() { defer wg.Done(); m.checkWarm(ctx) }()
		case <-reap.C:
			m.reap(ctx)
			// Off the loop: a new image is checked before it is used, which takes a moment.
			if m.refreshing.CompareAndSwap(false, true) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer m.refreshing.Store(false)
					for _, name := range m.refreshImages(ctx) {
						m.drain(ctx, name)
					}
				}()
			}
			for _, name := range m.names {
				select {
				case m.refill <- name:
				default:
				}
			}
		}
	}
}

const heartbeatEvery = 5 * time.Second

// pausedEvery is how often paused leases past their template's max_paused are released.
const pausedEvery = 30 * time.Second
