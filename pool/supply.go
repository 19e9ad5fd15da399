package pool

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
)

// supply is the warm supply of one node's templates: it claims sandboxes for leases (a warm one,
// one the refill hands a waiting lease, or a cold start), keeps each template's warm set at the
// target its sizer sets (refill.go), health-checks warm sandboxes and follows each template's
// image (image.go). It owns the counts of sandboxes being made and pending for a lease, the
// queue of waiting leases, and their locks:
//
//   - counts guards creating, and the warm set's changes made by the supply itself (a refill,
//     a hold, a settle), so that the counts and the change to them go together;
//   - queue guards what the lease path touches (claimed, bound, waiters, sizers, now, filling),
//     so that a lease never waits behind the refill's store calls; taken after counts where both
//     are held;
//   - imageMu guards images alone.
type supply struct {
	node      string
	api       string // this node's API address: with it, leases may claim other live nodes' warm sandboxes
	templates map[string]Template
	names     []string // the templates' names, in the configuration's order
	runtime   Runtime
	warm      WarmSet
	nodes     NodeRegistry
	// parallel bounds the refill's concurrent creations (sem); memoryBudget, when set, the
	// memory limits of all this node's sandboxes together, in MiB.
	parallel     int
	memoryBudget int64
	refill       chan string // templates whose refill was asked for
	sem          chan struct{}
	refreshing   atomic.Bool
	log          *slog.Logger
	metrics      *Metrics // nil until NewMetrics
	// passes counts the refill passes of each template (fill) and the rounds of health checks
	// (checkWarm) that have ended: a step a test can wait for to know the supply has acted, or
	// would have.
	passes struct {
		fills  map[string]*passCount
		checks atomic.Uint64
	}

	counts   sync.Mutex
	creating map[string]int // per template: sandboxes being made, or held out of the warm set for a while

	queue   sync.Mutex
	claimed map[string]int       // per template: sandboxes ever claimed, handed or started for a lease
	bound   map[string]int       // per template: of those, the ones whose lease was recorded or that went back
	waiters map[string][]*waiter // per template: leases waiting for a sandbox, oldest first
	sizers  map[string]*sizer    // per template: its warm target
	now     func() time.Time     // the sizers' clock: time.Now but in tests
	filling map[string]int       // per template: 1 while a refill runs, 2 when another was asked for meanwhile

	imageMu sync.Mutex
	images  map[string]templateImage // per template: the image new sandboxes are made from
}

// passCount counts the passes of one loop that have begun and that have ended.
type passCount struct{ begun, ended atomic.Uint64 }

// newSupply returns the supply of cfg's templates, which New has validated.
func newSupply(cfg Config) *supply {
	s := &supply{
		node: cfg.Node, api: cfg.API, templates: map[string]Template{}, runtime: cfg.Runtime,
		warm: cfg.Store, nodes: cfg.Store, parallel: cfg.RefillParallel, memoryBudget: cfg.MemoryBudgetMB,
		refill: make(chan string, 64), sem: make(chan struct{}, cfg.RefillParallel), log: cfg.Logger,
		creating: map[string]int{}, claimed: map[string]int{}, bound: map[string]int{}, waiters: map[string][]*waiter{},
		sizers: map[string]*sizer{}, now: time.Now, filling: map[string]int{}, images: map[string]templateImage{},
	}
	s.passes.fills = map[string]*passCount{}
	for _, t := range cfg.Templates {
		s.templates[t.Name] = t
		s.names = append(s.names, t.Name)
		s.sizers[t.Name] = newSizer(t.MinWarm, t.WarmCeiling())
		s.passes.fills[t.Name] = new(passCount)
	}
	return s
}

// Template returns the named template.
func (s *supply) Template(name string) (Template, bool) {
	t, ok := s.templates[name]
	return t, ok
}

func (s *supply) kick(template string) {
	select {
	case s.refill <- template:
	default:
	}
}

// PoolStatus is one template's pool on this node.
type PoolStatus = apitype.PoolStatus

// Pools reports each template's pool.
func (s *supply) Pools(ctx context.Context) ([]PoolStatus, error) {
	var out []PoolStatus
	warm, leased, err := s.warm.Counts(ctx, s.node, s.names)
	if err != nil {
		return nil, err
	}
	for i, name := range s.names {
		t := s.templates[name]
		ps := PoolStatus{Template: t.Name, Node: s.node, Warm: warm[i], Leased: leased[i], MinWarm: t.MinWarm, MaxWarm: t.WarmCeiling(), MaxTotal: t.MaxTotal}
		s.counts.Lock()
		ps.Creating = s.creating[t.Name]
		s.counts.Unlock()
		s.queue.Lock()
		sz := s.sizers[t.Name]
		ps.Target, ps.Waiting = sz.target, len(s.waiters[t.Name])
		ps.LeaseRate, ps.CreateSeconds = sz.rate(s.now()), sz.create.Seconds()
		ps.Refills = s.passes.fills[name].ended.Load()
		s.queue.Unlock()
		ps.Runtime, ps.Platform = t.RuntimePlatform()
		s.imageMu.Lock()
		if im := s.images[t.Name]; im.err != nil {
			ps.ImageError = im.err.Error()
		} else {
			ps.Image = im.id
		}
		s.imageMu.Unlock()
		out = append(out, ps)
	}
	return out, nil
}

// Warm reports whether every template's pool on this node holds its min_warm sandboxes, and if
// not, which one lags (or why the store could not say).
func (s *supply) Warm(ctx context.Context) (bool, string) {
	ps, err := s.Pools(ctx)
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
