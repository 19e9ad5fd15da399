package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/token"
)

// Binder makes a binding visible to this node's gateway and resolver at once; *binding.Cache
// meets it.
type Binder interface {
	Put(b binding.Binding)
	Delete(addr netip.Addr)
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
	Logger     *slog.Logger
}

// DefaultRefillParallel is how many sandboxes the refill makes at once unless told: the most
// creates per second measured on the Docker engine of a 2-core machine, whose engine work
// overlaps up to about this many (docs/bench-pool.md).
const DefaultRefillParallel = 4

// Manager runs one node's pool. Safe for concurrent use.
type Manager struct {
	cfg       Config
	leases    Leases
	warm      WarmSet
	nodes     NodeRegistry
	templates map[string]Template
	names     []string // the templates' names, in the configuration's order
	refill    chan string
	// started is closed once Run has made the store and the runtime agree (Cleanup or
	// Reconcile); startErr says why that failed. A lease waits for it: a lease granted before
	// would be dropped by the start's own sweep (its record unbound, its sandbox destroyed).
	started  chan struct{}
	startErr error
	log      *slog.Logger
	sem      chan struct{}
	mu       sync.Mutex
	counts   sync.Mutex     // the warm set's changes by the manager itself, and creating
	creating map[string]int // per template: sandboxes being made, or held out of the warm set for a while
	// queue guards what the lease path touches, so that it never waits behind the refill's
	// store calls (which hold counts); taken after counts where both are.
	queue      sync.Mutex
	claimed    map[string]int           // per template: sandboxes ever claimed, handed or started for a lease
	bound      map[string]int           // per template: of those, the ones whose lease was recorded or that went back
	waiters    map[string][]*waiter     // per template: leases waiting for a sandbox, oldest first
	sizers     map[string]*sizer        // per template: its warm target
	now        func() time.Time         // the sizers' clock: time.Now but in tests
	filling    map[string]int           // per template: 1 while a refill runs, 2 when another was asked for meanwhile
	images     map[string]templateImage // per template: the image new sandboxes are made from
	refreshing atomic.Bool
	metrics    *Metrics // nil until NewMetrics
	procMu     sync.Mutex
	procs      map[string]*leaseProcesses     // per lease id: its background processes
	uploads    map[string]map[string]FileInfo // per lease id: the files the tenant put there, by path
}

// templateImage is what the runtime last said of a template's image: its id, or why none can
// be used (missing, or failing the hardening checks).
type templateImage struct {
	id  string
	err error
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
	m := &Manager{cfg: cfg, leases: cfg.Store, warm: cfg.Store, nodes: cfg.Store, templates: map[string]Template{}, refill: make(chan string, 64), started: make(chan struct{}), log: cfg.Logger,
		sem: make(chan struct{}, cfg.RefillParallel), creating: map[string]int{}, claimed: map[string]int{}, bound: map[string]int{}, waiters: map[string][]*waiter{},
		sizers: map[string]*sizer{}, now: time.Now, filling: map[string]int{}, images: map[string]templateImage{},
		procs: map[string]*leaseProcesses{}, uploads: map[string]map[string]FileInfo{}}
	for _, t := range cfg.Templates {
		if errs := t.Validate(); len(errs) > 0 {
			return nil, fmt.Errorf("template %q: %w", t.Name, errors.Join(errs...))
		}
		if _, dup := m.templates[t.Name]; dup {
			return nil, fmt.Errorf("template %q: defined twice", t.Name)
		}
		m.templates[t.Name] = t
		m.names = append(m.names, t.Name)
		m.sizers[t.Name] = newSizer(t.MinWarm, t.WarmCeiling())
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
	return m, nil
}

// Template returns the named template.
func (m *Manager) Template(name string) (Template, bool) {
	t, ok := m.templates[name]
	return t, ok
}

// Run settles what an earlier run of this node left behind (Reconcile with KeepOnStop, else
// Cleanup), warms every template and keeps the pools full, healthy and reaped until ctx ends;
// then, without KeepOnStop, it destroys this node's sandboxes.
func (m *Manager) Run(ctx context.Context) error {
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
				m.log.Error("cleanup at stop", "err", err)
			}
		}()
	}
	close(m.started)
	m.refreshImages(ctx)
	for name := range m.templates {
		m.refill <- name
	}
	reap := time.NewTicker(time.Second)
	defer reap.Stop()
	health := time.NewTicker(m.cfg.HealthEvery)
	defer health.Stop()
	beat := time.NewTicker(heartbeatEvery)
	defer beat.Stop()
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
			for name := range m.templates {
				select {
				case m.refill <- name:
				default:
				}
			}
		}
	}
}

// startFailed records why Run could not start, for the leases that wait for it.
func (m *Manager) startFailed(err error) {
	m.startErr = err
	close(m.started)
}

// awaitStart waits until Run has started the node (or ctx ends).
func (m *Manager) awaitStart(ctx context.Context) error {
	select {
	case <-m.started:
		if m.startErr != nil {
			return fmt.Errorf("%w: the node did not start: %v", ErrNoWarm, m.startErr)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the node to start: %w", ctx.Err())
	}
}

// Reconcile makes the runtime and the store agree after a restart: warm sandboxes that still run
// are adopted, leases that are live and whose sandbox runs are kept, expired leases are ended,
// records whose sandbox is gone are dropped, and sandboxes nothing refers to are destroyed.
func (m *Manager) Reconcile(ctx context.Context) error {
	sbs, err := m.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	running := map[string]Sandbox{}
	for _, sb := range sbs {
		running[sb.ID] = sb
	}
	keep := map[string]bool{}
	warm, err := m.warm.ListWarm(ctx, m.cfg.Node)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, sb := range warm {
		if _, ok := running[sb.ID]; ok {
			keep[sb.ID] = true
			continue
		}
		if err := m.warm.Forget(ctx, sb); err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
	}
	leases, err := m.leases.ListLeases(ctx, m.cfg.Node)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	now := time.Now()
	for _, l := range leases {
		_, ok := running[l.Sandbox.ID]
		switch {
		case ok && now.Before(l.Expires):
			keep[l.Sandbox.ID] = true
		case ok:
			keep[l.Sandbox.ID] = true // end destroys it
			if err := m.end(ctx, l, "expiry"); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
		default:
			m.unbindLocal(l)
			if err := m.leases.Unbind(ctx, l); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			m.event(ctx, l, "reap", "its sandbox was gone when the node restarted")
		}
	}
	for id := range running {
		if !keep[id] {
			m.log.Info("destroying a sandbox no record refers to", "sandbox", id)
			if err := m.cfg.Runtime.Destroy(ctx, id); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
		}
	}
	return nil
}

// Cleanup destroys every sandbox of this node and drops its pool records. Sandboxes go first
// and every step runs even when another failed: with the store down, the containers must still go.
func (m *Manager) Cleanup(ctx context.Context) error {
	var errs []error
	sbs, err := m.cfg.Runtime.List(ctx)
	errs = append(errs, err)
	for _, sb := range sbs {
		errs = append(errs, m.cfg.Runtime.Destroy(ctx, sb.ID))
	}
	leases, err := m.leases.ListLeases(ctx, m.cfg.Node)
	errs = append(errs, err)
	for _, l := range leases {
		m.unbindLocal(l)
		errs = append(errs, m.leases.Unbind(ctx, l))
		if reason := m.revoke(ctx, m.cfg.Release, l); reason != "" {
			errs = append(errs, errors.New(reason))
		}
	}
	warm, err := m.warm.ListWarm(ctx, m.cfg.Node)
	errs = append(errs, err)
	for _, sb := range warm {
		errs = append(errs, m.warm.Forget(ctx, sb))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pool cleanup: %w", err)
	}
	return nil
}

// refreshImages asks the runtime for every template's current image and returns the templates
// whose image changed (a rebuild): their warm sandboxes are stale. A template whose image cannot
// be used is logged when that starts or its reason changes, and gets no new sandboxes meanwhile.
func (m *Manager) refreshImages(ctx context.Context) []string {
	// In parallel: a new id costs the runtime a read of the image's files.
	type answer struct {
		id  string
		err error
	}
	answers := make(map[string]answer, len(m.templates))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, t := range m.templates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := m.cfg.Runtime.Image(ctx, t)
			mu.Lock()
			answers[name] = answer{id, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	var changed []string
	for name := range m.templates {
		if m.noteImage(name, answers[name].id, answers[name].err) {
			changed = append(changed, name)
		}
	}
	return changed
}

// noteImage records what the runtime said of template name's image and reports whether the id
// changed from one already in use (a rebuild). A template whose image cannot be used is logged
// when that starts or its reason changes.
func (m *Manager) noteImage(name, id string, err error) bool {
	m.mu.Lock()
	old := m.images[name]
	if err != nil && old.id != "" {
		// The sandboxes already made from a checked image keep serving.
		m.images[name] = templateImage{id: old.id, err: err}
	} else {
		m.images[name] = templateImage{id: id, err: err}
	}
	m.mu.Unlock()
	switch {
	case err != nil && (old.err == nil || old.err.Error() != err.Error()):
		m.log.Error("template image cannot be used; no new sandboxes until it can", "template", name, "image", m.templates[name].Image, "err", err)
	case err == nil && old.id != "" && old.id != id:
		m.log.Info("template image changed; draining the warm sandboxes made from the old one", "template", name, "old", short(old.id), "new", short(id))
		return true
	}
	return false
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	return id[:min(12, len(id))]
}

// image returns the id new sandboxes of template name are made from, asking the runtime when
// nothing is known yet (a cold start before the first refresh).
func (m *Manager) image(ctx context.Context, name string) (string, error) {
	m.mu.Lock()
	im, known := m.images[name]
	m.mu.Unlock()
	if !known {
		id, err := m.cfg.Runtime.Image(ctx, m.templates[name])
		m.noteImage(name, id, err)
		m.mu.Lock()
		im = m.images[name]
		m.mu.Unlock()
	}
	if im.err != nil {
		return "", fmt.Errorf("template %q: %w", name, im.err)
	}
	return im.id, nil
}

// stale reports whether sb, a sandbox of this node, was made from an image its template no
// longer uses.
func (m *Manager) stale(sb Sandbox) bool {
	if sb.Node != m.cfg.Node || sb.Image == "" {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.images[sb.Template].id
	return cur != "" && cur != sb.Image
}

// create makes a sandbox of t from its template's current image.
func (m *Manager) create(ctx context.Context, t Template) (Sandbox, error) {
	id, err := m.image(ctx, t.Name)
	if err != nil {
		return Sandbox{}, err
	}
	t.Image = id
	start := time.Now()
	sb, err := m.cfg.Runtime.Create(ctx, t)
	m.metrics.observeCreate(time.Since(start), err)
	sb.Image = id
	return sb, err
}

// drain replaces the warm sandboxes of template name made from an image it no longer uses: each
// is held out of the warm set (so no lease claims it meanwhile) and destroyed, or put back.
func (m *Manager) drain(ctx context.Context, name string) {
	warm, err := m.warm.WarmCount(ctx, m.cfg.Node, name)
	if err != nil {
		return
	}
	for range warm {
		sb, err := m.hold(ctx, name)
		if err != nil {
			break
		}
		stale := m.stale(sb)
		m.settle(ctx, sb, !stale)
		if stale {
			m.metrics.drained()
		}
	}
	m.kick(name)
}

// hold takes one warm sandbox of template name out of the warm set for a while (a health check,
// a drain) and counts it as one being created, so a refill meanwhile neither replaces it nor
// counts it twice: the warm set and the count change together, under counts, and a refill reads
// both under it too.
func (m *Manager) hold(ctx context.Context, name string) (Sandbox, error) {
	m.counts.Lock()
	defer m.counts.Unlock()
	sb, err := m.warm.Claim(ctx, m.cfg.Node, name)
	if err == nil {
		m.creating[name]++
	}
	return sb, err
}

// settle ends a hold, or a creation: sb goes to the lease that has waited longest for one of
// its template, else into the warm set, when keep (and registering it works); else it is
// forgotten and destroyed. Either way it stops counting as being created.
func (m *Manager) settle(ctx context.Context, sb Sandbox, keep bool) {
	m.counts.Lock()
	m.creating[sb.Template]--
	if keep {
		keep = m.offer(ctx, sb)
	}
	m.counts.Unlock()
	if !keep {
		m.discard(ctx, sb)
	}
}

// discard forgets and destroys sb, a sandbox no lease will have, on a context that outlives
// its caller's.
func (m *Manager) discard(ctx context.Context, sb Sandbox) {
	m.warm.Forget(ctx, sb)
	m.cfg.Runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
}

// offer gives sb, a checked sandbox no lease holds, to the oldest waiting lease of its
// template (counted then as pending until that lease binds it), or else puts it in the warm
// set; it reports false if neither worked (then the caller destroys it). The store call is made
// outside the queue's lock, which the lease path takes: a lease that begins to wait while sb
// goes into the warm set finds it at its next look (see await).
func (m *Manager) offer(ctx context.Context, sb Sandbox) bool {
	m.queue.Lock()
	if q := m.waiters[sb.Template]; len(q) > 0 {
		q[0].ch <- sb // buffered, and each waiter is handed one sandbox at most
		m.waiters[sb.Template] = q[1:]
		m.claimed[sb.Template]++
		m.queue.Unlock()
		return true
	}
	m.queue.Unlock()
	if err := m.warm.AddWarm(ctx, sb); err != nil {
		m.log.Error("sandbox registration failed", "template", sb.Template, "err", err)
		return false
	}
	return true
}

// waiter is a lease waiting for a sandbox: settle hands it one on ch.
type waiter struct {
	ch chan Sandbox
}

// leave takes w out of template's queue. A sandbox handed to it meanwhile is returned, still
// counted as pending, for the caller to use or give back (unclaim).
func (m *Manager) leave(template string, w *waiter) (Sandbox, bool) {
	m.queue.Lock()
	defer m.queue.Unlock()
	q := m.waiters[template]
	for i := range q {
		if q[i] == w {
			m.waiters[template] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	select {
	case sb := <-w.ch:
		return sb, true
	default:
		return Sandbox{}, false
	}
}

// reserve counts one sandbox of t as pending for a lease, before the lease claims or starts
// it, so a refill meanwhile cannot take its room under max_total or the memory budget;
// unclaim ends that.
func (m *Manager) reserve(t Template) {
	m.queue.Lock()
	m.claimed[t.Name]++
	m.queue.Unlock()
}

// unclaim ends a reservation (the lease bound its sandbox, or has none); with sb, a sandbox
// claimed for a lease that will not use it, that sandbox goes back to the warm set or the
// oldest waiting lease.
func (m *Manager) unclaim(ctx context.Context, t Template, sb *Sandbox) {
	ctx = context.WithoutCancel(ctx) // a lease whose caller went away gives its sandbox back all the same
	m.queue.Lock()
	m.bound[t.Name]++
	m.queue.Unlock()
	if sb == nil {
		return
	}
	if !m.offer(ctx, *sb) {
		m.discard(ctx, *sb)
	}
}

// census is what this node's pools hold: warm and leased sandboxes per template, from the
// store, and those pending for a lease (of every template when all, else of one).
type census struct{ warm, leased, pending map[string]int }

// census reads the counts; counts is held, so the manager's own changes to the warm set wait.
// The lease path changes the store and its two counters without it: a lease counts itself
// claimed before it takes a warm sandbox, and bound after its lease is recorded. The store's
// counts are one atomic read; bound is read before it and claimed after, so a sandbox between
// the warm set and its lease at that instant is claimed and not yet bound in what census saw,
// and pending (claimed - bound) never counts it short. It may count one twice for a moment,
// which makes the refill wait a second, never overfill.
func (m *Manager) census(ctx context.Context, one string, all bool) (census, error) {
	c := census{warm: map[string]int{}, leased: map[string]int{}, pending: map[string]int{}}
	names := []string{one}
	if all {
		names = m.names
	}
	read := func(of map[string]int) []int {
		m.queue.Lock()
		defer m.queue.Unlock()
		out := make([]int, len(names))
		for i, name := range names {
			out[i] = of[name]
		}
		return out
	}
	bound := read(m.bound)
	warm, leased, err := m.warm.Counts(ctx, m.cfg.Node, names)
	if err != nil {
		return c, err
	}
	claimed := read(m.claimed)
	for i, name := range names {
		c.warm[name], c.leased[name], c.pending[name] = warm[i], leased[i], claimed[i]-bound[i]
	}
	return c, nil
}

// roomLocked is how many more sandboxes of t this node may make now: what max_total leaves of
// the template's warm, leased, pending and creating sandboxes, and what the memory budget
// leaves of every template's together, less what the other templates still lack of their
// min_warm floors (one template's burst must not keep another below its floor). counts is
// held.
func (m *Manager) roomLocked(t Template, c census) int {
	room := math.MaxInt
	if t.MaxTotal > 0 {
		room = t.MaxTotal - c.warm[t.Name] - c.leased[t.Name] - m.creating[t.Name] - c.pending[t.Name]
	}
	if budget := m.cfg.MemoryBudgetMB; budget > 0 && t.MemoryMB > 0 {
		var used int64
		for name, u := range m.templates {
			used += int64(c.warm[name]+c.leased[name]+m.creating[name]+c.pending[name]) * u.MemoryMB
			if short := u.MinWarm - c.warm[name] - m.creating[name]; name != t.Name && short > 0 {
				used += int64(short) * u.MemoryMB
			}
		}
		room = min(room, int((budget-used)/t.MemoryMB))
	}
	return max(room, 0)
}

// startFill reports whether a refill of template name should start now: not while one runs,
// which runs once more when it ends instead (a burst of leases asks for one each).
func (m *Manager) startFill(name string) bool {
	m.queue.Lock()
	defer m.queue.Unlock()
	if m.filling[name] > 0 {
		m.filling[name] = 2
		return false
	}
	m.filling[name] = 1
	return true
}

// fillAll runs fill for template name until no refill was asked for while the last one ran.
func (m *Manager) fillAll(ctx context.Context, name string) {
	for {
		m.fill(ctx, name)
		m.queue.Lock()
		again := m.filling[name] == 2 && ctx.Err() == nil
		if again {
			m.filling[name] = 1
		} else {
			delete(m.filling, name)
		}
		m.queue.Unlock()
		if !again {
			return
		}
	}
}

// fill brings the template's pool to its target (see sizer) and the leases waiting for it:
// it starts the sandboxes missing (as many as max_total and the memory budget leave room for,
// at most RefillParallel being made at once), or, with no lease waiting, destroys the warm
// ones above the target.
func (m *Manager) fill(ctx context.Context, name string) {
	t := m.templates[name]
	if _, err := m.image(ctx, name); err != nil {
		return // noteImage said why
	}
	// The counts and the change to them go together (see hold): two refills at once, or one
	// beside a health check, cannot both see the same gap.
	m.counts.Lock()
	c, err := m.census(ctx, name, m.cfg.MemoryBudgetMB > 0)
	if err != nil {
		m.counts.Unlock()
		if ctx.Err() == nil { // a stopping node's store calls fail; that is no refill failure
			m.log.Error("pool refill", "template", name, "err", err)
		}
		return
	}
	m.queue.Lock()
	target := m.sizers[name].update(m.now())
	waiting := len(m.waiters[name])
	m.queue.Unlock()
	warm := c.warm[name]
	// No more than the engine makes at once is asked for: a creation queued behind the parallel
	// bound would hold room under max_total that a cold start could use meanwhile, and the
	// refill runs again every second and at every lease and release.
	need := min(target+waiting-warm-m.creating[name], m.roomLocked(t, c), m.cfg.RefillParallel-m.creating[name])
	surplus := 0
	if waiting == 0 && m.creating[name] == 0 {
		surplus = warm - target
	}
	if need > 0 {
		m.creating[name] += need
	}
	m.counts.Unlock()
	for range surplus {
		sb, err := m.hold(ctx, name)
		if err != nil {
			break
		}
		m.settle(ctx, sb, false)
		m.metrics.shrank()
	}
	var wg sync.WaitGroup
	for range need {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed := func() { m.counts.Lock(); m.creating[name]--; m.counts.Unlock() }
			select {
			case m.sem <- struct{}{}:
			case <-ctx.Done():
				failed()
				return
			}
			defer func() { <-m.sem }()
			start := time.Now()
			sb, err := m.create(ctx, t)
			if err != nil {
				failed()
				if ctx.Err() == nil {
					m.log.Error("sandbox create failed", "template", name, "err", err)
				}
				return
			}
			// Checked before it is offered, so a lease never gets a sandbox that cannot work;
			// and not offered if its template was rebuilt while it was made.
			ok := true
			if err := m.cfg.Runtime.Check(ctx, sb); err != nil {
				if ctx.Err() == nil { // a stopping node's checks are cut short; that is no failure
					m.log.Error("new sandbox failed its health check; destroyed", "template", name, "err", err)
					m.metrics.observeCreate(0, err)
				}
				ok = false
			}
			keep := ok && !m.stale(sb)
			if keep {
				took := time.Since(start)
				m.queue.Lock()
				m.sizers[name].created(took)
				m.queue.Unlock()
				m.log.Debug("sandbox warm", "template", name, "sandbox", sb.ID, "addr", sb.Addr, "took", took)
			}
			m.settle(ctx, sb, keep)
		}()
	}
	wg.Wait()
}

// checkWarm checks every warm sandbox and replaces those that fail: each is taken out of the
// warm set first (so no lease can claim it meanwhile), checked, and put back only if healthy.
func (m *Manager) checkWarm(ctx context.Context) {
	for name, t := range m.templates {
		warm, err := m.warm.WarmCount(ctx, m.cfg.Node, name)
		if err != nil {
			return
		}
		for range warm {
			if !m.checkOne(ctx, t) {
				break
			}
		}
		m.kick(name)
	}
}

// checkOne holds one warm sandbox of t out of the warm set, checks it, and puts it back if it
// is healthy or destroys it if not; it reports whether there was one to check.
func (m *Manager) checkOne(ctx context.Context, t Template) bool {
	sb, err := m.hold(ctx, t.Name)
	if err != nil {
		return false
	}
	healthy := true
	if err := m.cfg.Runtime.Check(ctx, sb); err != nil {
		m.log.Error("warm sandbox failed its health check; replacing it", "template", t.Name, "sandbox", sb.ID, "err", err)
		m.metrics.unhealthy()
		healthy = false
	}
	m.settle(ctx, sb, healthy)
	return true
}

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
}

// Lease verifies the task token, claims a warm sandbox and binds it. The lease is returned only
// once this node's gateway and resolver recognise the sandbox. It makes no Docker or Vault call.
func (m *Manager) Lease(ctx context.Context, req LeaseRequest) (Lease, error) {
	t, ok := m.templates[req.Template]
	if !ok {
		return Lease{}, fmt.Errorf("%w %q", ErrUnknownTemplate, req.Template)
	}
	if err := CheckEnv(req.Env); err != nil {
		return Lease{}, err
	}
	if err := CheckMetadata(req.Metadata); err != nil {
		return Lease{}, err
	}
	task, err := m.admit(req.Token, req.Tenant)
	if err != nil {
		return Lease{}, err
	}
	if err := m.awaitStart(ctx); err != nil {
		return Lease{}, err
	}
	now := time.Now()
	expires := t.expiry(now, req.TTL, task.Expires)
	sb, start, err := m.claim(ctx, t)
	if err != nil {
		return Lease{}, err
	}
	defer m.unclaim(ctx, t, nil) // bound, or destroyed: either way no longer pending
	l := Lease{
		ID: "l-" + randomID(), Tenant: req.Tenant, Task: task.ID, JTI: task.JTI, Template: t.Name,
		Node: sb.Node, Sandbox: sb, Created: now, Expires: expires, Token: req.Token, Start: start, Key: req.Key,
		Env: req.Env, Metadata: req.Metadata,
	}
	b := bindingOf(l, task)
	if b.Version, err = m.leases.Bind(ctx, l, b); err != nil {
		// The claimed sandbox was never visible to the task: destroy it rather than reuse it.
		m.cfg.Runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
		return Lease{}, err
	}
	m.bindLocal(b)
	m.grantEvent(ctx, l, "bind", l.Start, task)
	m.metrics.observeLease(time.Since(now))
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

// bindingOf is what this lease's node tells its gateway and resolver about l: the sandbox's
// address and the task's scopes and budget, until l expires. The store gives it its version.
func bindingOf(l Lease, task token.Task) binding.Binding {
	return binding.Binding{
		Lease: l.ID, Node: l.Node, Addr: l.Sandbox.Addr, Task: l.Task, Tenant: l.Tenant, Sandbox: l.Sandbox.ID,
		Template: l.Template, Expires: l.Expires, Scopes: task.Scopes, Budget: task.Budget,
	}
}

// rebind stores l (held before under oldJTI) with its binding under task, and makes the binding
// visible here at once.
func (m *Manager) rebind(ctx context.Context, l Lease, oldJTI string, task token.Task) error {
	b := bindingOf(l, task)
	var err error
	if b.Version, err = m.leases.Rebind(ctx, l, oldJTI, b); err != nil {
		return err
	}
	m.bindLocal(b)
	return nil
}

// admit verifies raw for tenant and applies deployment policy: the one check every use of a
// task token passes, whether it binds a lease, replaces a lease's token or is presented to the
// gateway by a client outside the pool.
func (m *Manager) admit(raw, tenant string) (token.Task, error) {
	task, err := m.cfg.Verify(raw, tenant)
	if err != nil {
		return token.Task{}, fmt.Errorf("%w: %v", ErrTokenRefused, err)
	}
	if m.cfg.CheckTask != nil {
		if err := m.cfg.CheckTask(task); err != nil {
			return token.Task{}, fmt.Errorf("%w: %v", ErrTokenRefused, err)
		}
	}
	return task, nil
}

// AdmitBearer decides on a task token that a client outside the pool presents to this node's
// gateway, exactly as a lease would: verified for the tenant it names (its issuer must be
// allowed to speak for it), under the same deployment policy, and bound to one use of its jti,
// which no lease may then take and which no other node's gateway may use (the token must not
// already bind a lease either). Safe for concurrent use.
func (m *Manager) AdmitBearer(ctx context.Context, raw string) (token.Task, error) {
	task, err := m.admit(raw, "")
	if err != nil {
		return token.Task{}, err
	}
	if err := m.leases.ClaimJTI(ctx, task.JTI, BearerHolder(m.cfg.Node), task.Expires); err != nil {
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

const heartbeatEvery = 5 * time.Second

// bindLocal makes b visible at once to this node's gateway and resolver. A binding of another
// node's sandbox is not: its address means something else here, and that node's cache finds
// the binding in the store on its first lookup.
func (m *Manager) bindLocal(b binding.Binding) {
	if b.Node == m.cfg.Node {
		m.cfg.Binder.Put(b)
	}
}

func (m *Manager) unbindLocal(l Lease) {
	if l.Node == m.cfg.Node {
		m.cfg.Binder.Delete(l.Sandbox.Addr)
	}
}

// Node is the name of this node.
func (m *Manager) Node() string { return m.cfg.Node }

// NodeAPI returns the API address of a live node.
func (m *Manager) NodeAPI(ctx context.Context, node string) (string, error) {
	nodes, err := m.nodes.Nodes(ctx)
	if err != nil {
		return "", err
	}
	api, ok := nodes[node]
	if !ok {
		return "", fmt.Errorf("node %s, which holds this lease, is not running", node)
	}
	return api, nil
}

func (m *Manager) heartbeat(ctx context.Context) {
	if m.cfg.API == "" {
		return
	}
	if err := m.nodes.Heartbeat(ctx, m.cfg.Node, m.cfg.API, 3*heartbeatEvery); err != nil {
		m.log.Error("heartbeat", "err", err)
	}
}

// claimAnywhere takes a warm sandbox of t from this node, else from another live node (whose
// gateway and resolver then serve it: the binding goes to that node).
func (m *Manager) claimAnywhere(ctx context.Context, t Template) (Sandbox, error) {
	sb, err := m.warm.Claim(ctx, m.cfg.Node, t.Name)
	if err == nil || !errors.Is(err, ErrNoWarm) || m.cfg.API == "" {
		return sb, err
	}
	nodes, nerr := m.nodes.Nodes(ctx)
	if nerr != nil {
		return Sandbox{}, err
	}
	for node := range nodes {
		if node == m.cfg.Node {
			continue
		}
		if sb, oerr := m.warm.Claim(ctx, node, t.Name); oerr == nil {
			return sb, nil
		}
	}
	return Sandbox{}, err
}

// claimFresh is claimAnywhere, destroying what it takes that was made from an image its template
// no longer uses (a rebuild the drain has not reached yet).
func (m *Manager) claimFresh(ctx context.Context, t Template) (Sandbox, error) {
	for {
		sb, err := m.claimAnywhere(ctx, t)
		if err != nil || !m.stale(sb) {
			return sb, err
		}
		m.warm.Forget(ctx, sb)
		go m.cfg.Runtime.Destroy(context.WithoutCancel(ctx), sb.ID) // the lease does not wait for it
		m.metrics.drained()
	}
}

// claim takes a sandbox of t for a lease: a warm one; when there is none, as the template's
// on_empty says, it waits for the first to become warm (leases served in the order they
// came), then starts one or refuses (after_wait), or starts one at once, or refuses at once.
// It reports which happened: "warm", "waited" or "cold". The sandbox stays counted as pending
// until the caller calls unclaim.
func (m *Manager) claim(ctx context.Context, t Template) (Sandbox, string, error) {
	now := time.Now()
	m.queue.Lock()
	m.sizers[t.Name].leased(m.now())
	queued := len(m.waiters[t.Name]) > 0
	m.claimed[t.Name]++
	m.queue.Unlock()
	if !queued { // a lease that came later does not pass one that waits
		sb, err := m.claimFresh(ctx, t)
		if err == nil {
			m.kick(t.Name)
			m.metrics.started("warm", 0)
			return sb, "warm", nil
		}
		if !errors.Is(err, ErrNoWarm) {
			m.unclaim(ctx, t, nil)
			return Sandbox{}, "", err
		}
	}
	m.unclaim(ctx, t, nil)
	// Whatever on_empty says, this lease found nothing warm: the target rises for it.
	m.queue.Lock()
	m.sizers[t.Name].waited(m.now(), 1)
	m.queue.Unlock()
	switch t.OnEmpty {
	case "refuse":
		m.kick(t.Name)
		return Sandbox{}, "", fmt.Errorf("%w: template %q had no warm sandbox and refuses a lease then (on_empty: refuse; its pool: min_warm %d, max_warm %d)",
			ErrNoWarm, t.Name, t.MinWarm, t.WarmCeiling())
	case "cold":
		m.kick(t.Name)
		return m.coldStart(ctx, t, now)
	}
	wait := t.WaitFor
	if wait <= 0 {
		wait = 10 * time.Second
	}
	sb, err := m.await(ctx, t, wait)
	switch {
	case err == nil:
		m.metrics.started("waited", time.Since(now))
		return sb, "waited", nil
	case !errors.Is(err, ErrNoWarm) || t.AfterWait == "refuse":
		return Sandbox{}, "", err
	}
	return m.coldStart(ctx, t, now)
}

// await queues a lease for a sandbox of t and waits, at most wait, for the refill (or another
// node's warm set) to give it one; the sandbox it returns is counted as pending.
func (m *Manager) await(ctx context.Context, t Template, wait time.Duration) (Sandbox, error) {
	w := &waiter{ch: make(chan Sandbox, 1)}
	m.queue.Lock()
	m.waiters[t.Name] = append(m.waiters[t.Name], w)
	m.queue.Unlock()
	m.kick(t.Name)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// The queue is served by this node's refill; a sandbox put in the warm set beside it (one
	// offered as this lease began to wait, or by another node) is looked for every 100 ms by
	// the oldest waiter, one store call.
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case sb := <-w.ch:
			return sb, nil
		case <-poll.C:
			if !m.oldest(t.Name, w) {
				continue
			}
			m.reserve(t)
			sb, err := m.claimFresh(ctx, t)
			if err != nil {
				m.unclaim(ctx, t, nil)
				continue
			}
			if handed, ok := m.leave(t.Name, w); ok {
				m.unclaim(ctx, t, &handed) // two for one lease: the one handed goes on
			}
			return sb, nil
		case <-timer.C:
			if sb, ok := m.leave(t.Name, w); ok {
				return sb, nil
			}
			return Sandbox{}, fmt.Errorf("%w: template %q had no warm sandbox within %s (min_warm %d, max_warm %d, max_total %d)",
				ErrNoWarm, t.Name, wait, t.MinWarm, t.WarmCeiling(), t.MaxTotal)
		case <-ctx.Done():
			if sb, ok := m.leave(t.Name, w); ok {
				m.unclaim(ctx, t, &sb)
			}
			return Sandbox{}, ctx.Err()
		}
	}
}

// oldest reports whether w is the first of template's waiting leases.
func (m *Manager) oldest(template string, w *waiter) bool {
	m.queue.Lock()
	defer m.queue.Unlock()
	q := m.waiters[template]
	return len(q) > 0 && q[0] == w
}

// coldStart starts a sandbox of t for one lease, if max_total and the memory budget leave
// room for it; it is counted as pending from the start.
func (m *Manager) coldStart(ctx context.Context, t Template, asked time.Time) (Sandbox, string, error) {
	m.counts.Lock()
	c, err := m.census(ctx, t.Name, m.cfg.MemoryBudgetMB > 0)
	room := 0
	if err == nil {
		if room = m.roomLocked(t, c); room > 0 {
			m.reserve(t)
		}
	}
	m.counts.Unlock()
	switch {
	case err != nil:
		return Sandbox{}, "", err
	case room == 0:
		return Sandbox{}, "", fmt.Errorf("%w: template %q has no warm sandbox and no room for another: it is at its max_total of %d sandboxes or the node's memory budget",
			ErrNoWarm, t.Name, t.MaxTotal)
	}
	sb, err := m.create(ctx, t)
	if err != nil {
		m.unclaim(ctx, t, nil)
		return Sandbox{}, "", fmt.Errorf("cold start of template %q failed: %w", t.Name, err)
	}
	m.metrics.started("cold", time.Since(asked))
	return sb, "cold", nil
}

func (m *Manager) kick(template string) {
	select {
	case m.refill <- template:
	default:
	}
}

// Get returns tenant's lease id.
func (m *Manager) Get(ctx context.Context, tenant, id string) (Lease, error) {
	l, err := m.leases.GetLease(ctx, id)
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
func (m *Manager) Held(ctx context.Context, tenant, id string) (Lease, error) {
	l, err := m.Get(ctx, tenant, id)
	if err != nil {
		return Lease{}, err
	}
	if l.Node != m.cfg.Node {
		return Lease{}, fmt.Errorf("%w: lease %s is on node %s, not %s", ErrNotOwner, id, l.Node, m.cfg.Node)
	}
	return l, nil
}

// Release ends tenant's lease id: unbind first, then destroy the sandbox, then refill. A release
// asked for is carried out whether or not the caller waits for the answer: it runs on a context
// of its own from the start (see end).
func (m *Manager) Release(ctx context.Context, tenant, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	l, err := m.Held(ctx, tenant, id)
	if err != nil {
		return err
	}
	return m.end(ctx, l, "release")
}

// teardownTimeout bounds how long ending a lease may take: unbinding, revoking what was minted
// for it and destroying its sandbox.
const teardownTimeout = 2 * time.Minute

// end ends l: unbind first, so nothing reaches the sandbox or its credentials any more, then
// revoke and destroy. Once begun it runs to the end on a context of its own: a caller that goes
// away (a client that hangs up right after DELETE) must not leave an unbound lease whose
// credentials stay valid and whose sandbox lives on with nothing left to reap it. The outcome,
// failures included, is the lease's audit record.
func (m *Manager) end(ctx context.Context, l Lease, event string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	m.unbindLocal(l)
	if err := m.leases.Unbind(ctx, l); err != nil {
		return err
	}
	m.endProcesses(l.ID)
	m.recordWorkspace(ctx, l)
	var problems []string
	if r := m.revoke(ctx, m.cfg.Release, l); r != "" {
		problems = append(problems, r)
	}
	err := m.cfg.Runtime.Destroy(ctx, l.Sandbox.ID)
	if err != nil {
		m.log.Error("destroying sandbox", "lease", l.ID, "sandbox", l.Sandbox.ID, "err", err)
		problems = append(problems, "destroying the sandbox failed: "+err.Error())
	}
	m.event(ctx, l, event, strings.Join(problems, "; "))
	// Everything the lease did is signed as soon as it ends, so its receipt is covered at once.
	if cp, ok := m.cfg.Audit.(audit.Checkpointer); ok {
		if _, cerr := cp.Checkpoint(ctx); cerr != nil && !errors.Is(cerr, audit.ErrNoSigner) {
			m.log.Error("audit checkpoint at lease end", "lease", l.ID, "err", cerr)
		}
	}
	m.kick(l.Template)
	return err
}

// revoke calls f (Config.Release or Revoke) for l's per-task material, returning a reason for
// the audit record when it fails (the lease ends regardless; what could not be revoked now the
// broker retries, and it expires with the lease).
func (m *Manager) revoke(ctx context.Context, f func(context.Context, string) error, l Lease) string {
	if f == nil {
		return ""
	}
	if err := f(ctx, l.ID); err != nil {
		m.log.Error("revoking per-task credentials", "lease", l.ID, "err", err)
		return "revocation failed: " + err.Error()
	}
	return ""
}

func (m *Manager) reap(ctx context.Context) {
	ls, err := m.leases.Expired(ctx, m.cfg.Node, time.Now())
	if err != nil {
		m.log.Error("reaper", "err", err)
		return
	}
	for _, l := range ls {
		m.metrics.reaped()
		if err := m.end(ctx, l, "expiry"); err != nil {
			m.log.Error("reaping expired lease", "lease", l.ID, "err", err)
		}
	}
}

// Exec runs req in tenant's lease id.
func (m *Manager) Exec(ctx context.Context, tenant, id string, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	l, err := m.Held(ctx, tenant, id)
	if err != nil {
		return -1, err
	}
	if len(req.Cmd) == 0 {
		return -1, fmt.Errorf("%w: exec needs a command", ErrBadRequest)
	}
	if !time.Now().Before(l.Expires) {
		return -1, fmt.Errorf("%w: lease %s has expired", ErrLeaseNotFound, id)
	}
	if req.Env, err = commandEnv(l, req.Env); err != nil {
		return -1, err
	}
	start := time.Now()
	tp := m.newTaps(stdin != nil)
	if stdin != nil {
		stdin = io.TeeReader(stdin, tp.in)
	}
	out, errOut := &countWriter{w: io.MultiWriter(stdout, tp.out)}, &countWriter{w: io.MultiWriter(stderr, tp.err)}
	code, err := m.cfg.Runtime.Exec(ctx, l.Sandbox, req, stdin, out, errOut)
	rec := audit.Record{
		Kind: audit.KindExec, Node: m.cfg.Node, Tenant: l.Tenant, Lease: l.ID, Task: l.Task,
		Sandbox: l.Sandbox.ID, Command: req.Cmd, ExitCode: &code, BytesDown: out.n + errOut.n,
		DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	}
	tp.fill(m, l.ID, &rec)
	if err != nil {
		rec.Reason = err.Error()
	}
	if aerr := m.cfg.Audit.Write(ctx, rec); aerr != nil {
		m.log.Error("audit write failed", "err", aerr)
	}
	return code, err
}

// grantEvent records a lease event that grants the task's scopes (bind, token swap), with the
// sandbox's template and runtime.
func (m *Manager) grantEvent(ctx context.Context, l Lease, event, reason string, task token.Task) {
	rec := audit.Record{
		Kind: audit.KindLease, Event: event, Node: m.cfg.Node, Tenant: l.Tenant, Lease: l.ID,
		Task: l.Task, Sandbox: l.Sandbox.ID, Source: l.Sandbox.Addr.String(), Reason: reason,
		Template: l.Template, Runtime: m.templates[l.Template].EngineRuntime(),
	}
	for _, sc := range task.Scopes {
		rec.Scopes = append(rec.Scopes, sc.String())
	}
	if err := m.cfg.Audit.Write(ctx, rec); err != nil {
		m.log.Error("audit write failed", "err", err)
	}
}

func (m *Manager) event(ctx context.Context, l Lease, event, reason string) {
	err := m.cfg.Audit.Write(ctx, audit.Record{
		Kind: audit.KindLease, Event: event, Node: m.cfg.Node, Tenant: l.Tenant, Lease: l.ID,
		Task: l.Task, Sandbox: l.Sandbox.ID, Source: l.Sandbox.Addr.String(), Reason: reason,
	})
	if err != nil {
		m.log.Error("audit write failed", "err", err)
	}
}

// PoolStatus is one template's pool on this node.
type PoolStatus = apitype.PoolStatus

// Pools reports each template's pool.
func (m *Manager) Pools(ctx context.Context) ([]PoolStatus, error) {
	var out []PoolStatus
	warm, leased, err := m.warm.Counts(ctx, m.cfg.Node, m.names)
	if err != nil {
		return nil, err
	}
	for i, t := range m.cfg.Templates {
		ps := PoolStatus{Template: t.Name, Node: m.cfg.Node, Warm: warm[i], Leased: leased[i], MinWarm: t.MinWarm, MaxWarm: t.WarmCeiling(), MaxTotal: t.MaxTotal}
		m.counts.Lock()
		ps.Creating = m.creating[t.Name]
		m.counts.Unlock()
		m.queue.Lock()
		sz := m.sizers[t.Name]
		ps.Target, ps.Waiting = sz.target, len(m.waiters[t.Name])
		ps.LeaseRate, ps.CreateSeconds = sz.rate(m.now()), sz.create.Seconds()
		m.queue.Unlock()
		ps.Runtime, ps.Platform = t.RuntimePlatform()
		m.mu.Lock()
		if im := m.images[t.Name]; im.err != nil {
			ps.ImageError = im.err.Error()
		} else {
			ps.Image = im.id
		}
		m.mu.Unlock()
		out = append(out, ps)
	}
	return out, nil
}

// Warm reports whether every template's pool on this node holds its min_warm sandboxes, and if
// not, which one lags (or why the store could not say).
func (m *Manager) Warm(ctx context.Context) (bool, string) {
	ps, err := m.Pools(ctx)
	if err != nil {
		return false, err.Error()
	}
	for _, p := range ps {
		if p.Warm < p.MinWarm {
			if p.ImageError != "" {
				return false, fmt.Sprintf("template %s has %d of %d warm sandboxes: %s", p.Template, p.Warm, p.MinWarm, p.ImageError)
			}
			return false, fmt.Sprintf("template %s has %d of %d warm sandboxes", p.Template, p.Warm, p.MinWarm)
		}
	}
	return true, ""
}

func randomID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// List returns tenant's leases on this node and every other live one.
func (m *Manager) List(ctx context.Context, tenant string) ([]Lease, error) {
	nodes, err := m.nodes.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	nodes[m.cfg.Node] = ""
	var out []Lease
	for node := range nodes {
		ls, err := m.leases.ListLeases(ctx, node)
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
