package binding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/scope"
)

// Errors a lookup can end in. Both mean deny.
var (
	// ErrUnknown: no lease is bound to that address (never leased, released or expired).
	ErrUnknown = errors.New("no lease is bound to this sandbox address")
	// ErrUnavailable: the store cannot be asked and the cache may be stale.
	ErrUnavailable = errors.New("lease store unavailable")
)

// Binding is what the gateway and resolver know about a leased sandbox. It holds no secret: the
// token itself stays in the store.
type Binding struct {
	Lease     string        `json:"lease"`
	Node      string        `json:"node"`
	Addr      netip.Addr    `json:"addr"`
	Task      string        `json:"task"`
	Tenant    string        `json:"tenant,omitempty"`
	Sandbox   string        `json:"sandbox"`
	Template  string        `json:"template"`
	Expires   time.Time     `json:"expires"`
	Version   int64         `json:"version"`
	RawScopes []scope.Scope `json:"scopes"`
	Budget    budget.Budget `json:"budget,omitzero"`
	Scopes    scope.Set     `json:"-"`
}

// Decode parses a binding as stored and re-validates its scopes.
func Decode(b []byte) (Binding, error) {
	var x Binding
	if err := json.Unmarshal(b, &x); err != nil {
		return x, fmt.Errorf("binding: %w", err)
	}
	s, err := scope.Parse(x.RawScopes)
	if err != nil {
		return x, fmt.Errorf("binding for lease %s: %w", x.Lease, err)
	}
	x.Scopes = s
	return x, nil
}

// Encode returns the stored form of b.
func (b Binding) Encode() ([]byte, error) {
	if b.RawScopes == nil {
		b.RawScopes = b.Scopes
	}
	return json.Marshal(b)
}

// Event is a change published on the binding channel. A nil Binding with Lease set means unbound.
type Event struct {
	Addr    netip.Addr `json:"addr"`
	Lease   string     `json:"lease"`
	Version int64      `json:"version"`
	Bound   bool       `json:"bound"`
}

// Source is the shared store behind the cache.
type Source interface {
	// Lookup returns the binding of addr on node, or ErrUnknown.
	Lookup(ctx context.Context, node string, addr netip.Addr) (Binding, error)
	// Watch calls onEvent for each change and onSync each time the feed is (re)established, and
	// returns when ctx ends or the feed breaks.
	Watch(ctx context.Context, node string, onSync func(), onEvent func(Event)) error
}

// Peeker is met by bindings that can answer from memory alone, without asking the store: a
// refusal made before any lookup (a query over its rate) uses it to name the lease it came from.
// Peek returns addr's binding and true only when one is held and live.
type Peeker interface {
	Peek(addr netip.Addr) (Binding, bool)
}

// Cache answers lookups for one node. Safe for concurrent use.
//
// It never serves a binding older than one it has heard is gone or replaced: for each address
// it keeps the newest version it has heard of (versions are ordered by the store, not by any
// node's clock), and a generation that every change bumps, so a binding fetched on a miss is kept
// only if nothing about that address changed while it was being fetched. A release that lands
// between a miss's lookup and its put therefore never leaves the released binding cached.
type Cache struct {
	node  string
	src   Source
	grace time.Duration
	now   func() time.Time

	mu      sync.RWMutex
	entries map[netip.Addr]Binding
	fences  map[netip.Addr]fence // bounded by the node's sandbox subnet
	epoch   uint64               // bumped at every resync: every fence changes at once
	// downSince is when the feed was lost; zero while it is up. Cached entries serve for at most
	// grace after it, then every lookup fails until the feed is back and the cache resynced.
	downSince time.Time
	live      bool
}

// fence is what the cache has heard about one address.
type fence struct {
	version int64  // the newest binding version heard of (bound or unbound)
	gen     uint64 // bumped by every change to the address
}

// NewCache returns a cache for node; grace zero means 10s. Run must be running for it to serve.
func NewCache(node string, src Source, grace time.Duration) *Cache {
	if grace == 0 {
		grace = 10 * time.Second
	}
	return &Cache{node: node, src: src, grace: grace, now: time.Now, entries: map[netip.Addr]Binding{},
		fences: map[netip.Addr]fence{}}
}

// Run keeps the cache fed until ctx ends, reconnecting with a short backoff.
func (c *Cache) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := c.src.Watch(ctx, c.node, c.resync, c.apply)
		c.mu.Lock()
		if c.live {
			c.live, c.downSince = false, c.now()
		}
		c.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		_ = err
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cache) resync() {
	c.mu.Lock()
	clear(c.entries)
	c.epoch++ // events may have been missed: no fetch that started before now is kept
	c.live, c.downSince = true, time.Time{}
	c.mu.Unlock()
}

// changed records a change to addr at version v (0: unknown) and drops its entry unless the
// entry is newer. The caller holds mu.
func (c *Cache) changed(addr netip.Addr, v int64) {
	f := c.fences[addr]
	f.gen++
	f.version = max(f.version, v)
	c.fences[addr] = f
	if cur, ok := c.entries[addr]; !ok || cur.Version <= v || v == 0 {
		delete(c.entries, addr)
	}
}

func (c *Cache) apply(e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Drop the entry either way (unless it is newer than the event): a bind is fetched on next
	// use, so the cache never serves a binding older than the event.
	c.changed(e.Addr, e.Version)
}

// Put records b locally; the node that binds a lease calls it before returning the lease, so the
// gateway and resolver recognise the sandbox at once. A binding older than one the cache has
// heard of is not kept.
func (c *Cache) Put(b Binding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(b)
}

func (c *Cache) put(b Binding) {
	if b.Version < c.fences[b.Addr].version {
		return
	}
	if cur, ok := c.entries[b.Addr]; ok && cur.Version > b.Version {
		return
	}
	c.entries[b.Addr] = b
}

// Delete forgets addr locally; the node calls it first when it unbinds a lease. A fetch of addr
// under way is not kept.
func (c *Cache) Delete(addr netip.Addr) {
	c.mu.Lock()
	c.changed(addr, 0)
	c.mu.Unlock()
}

// Lookup returns the live binding of addr. It fails with ErrUnknown for an unbound or expired
// address and ErrUnavailable when the store is down past the grace.
func (c *Cache) Lookup(ctx context.Context, addr netip.Addr) (Binding, error) {
	addr = addr.Unmap()
	now := c.now()
	c.mu.RLock()
	b, ok := c.entries[addr]
	live, down := c.live, c.downSince
	gen, epoch := c.fences[addr].gen, c.epoch
	c.mu.RUnlock()
	if !live && (down.IsZero() || now.Sub(down) > c.grace) {
		return Binding{}, fmt.Errorf("%w: binding feed down", ErrUnavailable)
	}
	if !ok {
		var err error
		if b, err = c.fetch(ctx, addr, gen, epoch); err != nil {
			return Binding{}, err
		}
	}
	if !now.Before(b.Expires) {
		return Binding{}, fmt.Errorf("%w: lease %s expired at %s", ErrUnknown, b.Lease, b.Expires.UTC().Format(time.RFC3339))
	}
	return b, nil
}

var _ Peeker = (*Cache)(nil)

// Peek returns addr's binding if the cache holds a live one, without asking the store: what a
// refusal made before the lookup (a query over its rate) uses to name the lease it came from.
func (c *Cache) Peek(addr netip.Addr) (Binding, bool) {
	addr = addr.Unmap()
	c.mu.RLock()
	b, ok := c.entries[addr]
	c.mu.RUnlock()
	return b, ok && c.now().Before(b.Expires)
}

// fetch asks the store for addr's binding and keeps it, unless the address changed while it was
// being read (gen and epoch are what the cache knew before): then what was read may already be
// gone, so it is neither kept nor served, and the store is asked again.
func (c *Cache) fetch(ctx context.Context, addr netip.Addr, gen, epoch uint64) (Binding, error) {
	for range 3 {
		b, err := c.src.Lookup(ctx, c.node, addr)
		if errors.Is(err, ErrUnknown) {
			return Binding{}, err
		}
		if err != nil {
			return Binding{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		c.mu.Lock()
		f := c.fences[addr]
		if f.gen == gen && c.epoch == epoch {
			if b.Version < f.version {
				c.mu.Unlock()
				return Binding{}, fmt.Errorf("%w: lease %s was replaced or released", ErrUnknown, b.Lease)
			}
			c.put(b)
			c.mu.Unlock()
			return b, nil
		}
		gen, epoch = f.gen, c.epoch
		c.mu.Unlock()
	}
	return Binding{}, fmt.Errorf("%w: the binding of %s kept changing while it was read", ErrUnavailable, addr)
}

// Live reports whether the cache currently follows the binding channel.
func (c *Cache) Live() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.live
}

// Static answers every address with one binding (its Addr set to the address asked about): a
// stand-in for the cache in benchmarks, where one load generator plays every sandbox.
type Static struct{ Binding Binding }

// Lookup returns s.Binding for addr.
func (s Static) Lookup(_ context.Context, addr netip.Addr) (Binding, error) {
	b := s.Binding
	b.Addr = addr
	return b, nil
}
