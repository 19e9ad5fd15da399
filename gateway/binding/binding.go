package binding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/gateway/scope"
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
	Budget    scope.Budget  `json:"budget,omitzero"`
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

// Cache answers lookups for one node. Safe for concurrent use.
type Cache struct {
	node  string
	src   Source
	grace time.Duration
	now   func() time.Time

	mu      sync.RWMutex
	entries map[netip.Addr]Binding
	// downSince is when the feed was lost; zero while it is up. Cached entries serve for at most
	// grace after it, then every lookup fails until the feed is back and the cache resynced.
	downSince time.Time
	live      bool
}

// NewCache returns a cache for node; grace zero means 10s. Run must be running for it to serve.
func NewCache(node string, src Source, grace time.Duration) *Cache {
	if grace == 0 {
		grace = 10 * time.Second
	}
	return &Cache{node: node, src: src, grace: grace, now: time.Now, entries: map[netip.Addr]Binding{}}
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
	c.live, c.downSince = true, time.Time{}
	c.mu.Unlock()
}

func (c *Cache) apply(e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.entries[e.Addr]
	if ok && cur.Version > e.Version {
		return
	}
	// Drop the entry either way: a bind is fetched on next use, so the cache never serves a
	// binding older than the event.
	delete(c.entries, e.Addr)
}

// Put records b locally; the node that binds a lease calls it before returning the lease, so the
// gateway and resolver recognise the sandbox at once.
func (c *Cache) Put(b Binding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.entries[b.Addr]; ok && cur.Version > b.Version {
		return
	}
	c.entries[b.Addr] = b
}

// Delete forgets addr locally; the node calls it first when it unbinds a lease.
func (c *Cache) Delete(addr netip.Addr) {
	c.mu.Lock()
	delete(c.entries, addr)
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
	c.mu.RUnlock()
	if !live && (down.IsZero() || now.Sub(down) > c.grace) {
		return Binding{}, fmt.Errorf("%w: binding feed down", ErrUnavailable)
	}
	if !ok {
		var err error
		b, err = c.src.Lookup(ctx, c.node, addr)
		if errors.Is(err, ErrUnknown) {
			return Binding{}, err
		}
		if err != nil {
			return Binding{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		c.Put(b)
	}
	if !now.Before(b.Expires) {
		return Binding{}, fmt.Errorf("%w: lease %s expired at %s", ErrUnknown, b.Lease, b.Expires.UTC().Format(time.RFC3339))
	}
	return b, nil
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
