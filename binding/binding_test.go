package binding

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/scope"
)

// fakeSource is a Source whose feed the test opens and breaks.
type fakeSource struct {
	mu       sync.Mutex
	bindings map[netip.Addr]Binding
	lookups  int
	down     bool
	feed     chan Event
	broken   chan struct{}
	// during, when set, runs inside Lookup after the binding was read and before it is
	// returned: what happens meanwhile elsewhere.
	during func()
}

var _ Source = (*fakeSource)(nil)

func (f *fakeSource) Lookup(_ context.Context, _ string, addr netip.Addr) (Binding, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if f.down {
		return Binding{}, errors.New("connection refused")
	}
	b, ok := f.bindings[addr]
	if during := f.during; during != nil {
		f.during = nil
		f.mu.Unlock()
		during()
		f.mu.Lock()
	}
	if !ok {
		return Binding{}, ErrUnknown
	}
	return b, nil
}

func (f *fakeSource) Watch(ctx context.Context, _ string, onSync func(), onEvent func(Event)) error {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return errors.New("connection refused")
	}
	onSync()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.broken:
			return errors.New("feed broken")
		case e := <-f.feed:
			onEvent(e)
		}
	}
}

func TestCacheFailsClosed(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.2")
	set, _ := scope.Parse([]scope.Scope{{Host: "a.example"}})
	src := &fakeSource{
		bindings: map[netip.Addr]Binding{a: {Lease: "l-1", Addr: a, Expires: time.Now().Add(time.Hour), Scopes: set, Version: 1}},
		feed:     make(chan Event), broken: make(chan struct{}),
	}
	c := NewCache("n1", src, 10*time.Second)
	now := time.Now()
	c.now = func() time.Time { return now }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if _, err := c.Lookup(ctx, a); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lookup before the feed is up = %v, want ErrUnavailable", err)
	}
	go c.Run(ctx)
	waitLive(t, c, true)
	if b, err := c.Lookup(ctx, a); err != nil || b.Lease != "l-1" {
		t.Fatalf("lookup = %v, %v", b, err)
	}
	_, err := c.Lookup(ctx, a)
	src.mu.Lock()
	n := src.lookups
	src.mu.Unlock()
	if err != nil || n != 1 {
		t.Fatalf("second lookup went to the source (%d lookups): %v", n, err)
	}
	if _, err := c.Lookup(ctx, netip.MustParseAddr("10.0.0.9")); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown address = %v", err)
	}

	// An unbind event drops the entry at once.
	src.mu.Lock()
	delete(src.bindings, a)
	src.mu.Unlock()
	src.feed <- Event{Addr: a, Lease: "l-1", Version: 2}
	src.feed <- Event{} // the first event is applied once the second is taken
	if _, err := c.Lookup(ctx, a); !errors.Is(err, ErrUnknown) {
		t.Fatalf("after unbind = %v, want ErrUnknown", err)
	}

	// Redis goes away: cached entries serve for the grace only.
	c.Put(Binding{Lease: "l-2", Addr: a, Expires: now.Add(time.Hour), Scopes: set, Version: 3})
	src.mu.Lock()
	src.down = true
	src.mu.Unlock()
	close(src.broken)
	waitLive(t, c, false)
	if _, err := c.Lookup(ctx, a); err != nil {
		t.Fatalf("within grace = %v", err)
	}
	now = now.Add(11 * time.Second)
	if _, err := c.Lookup(ctx, a); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("past grace = %v, want ErrUnavailable", err)
	}
}

func TestCacheRefusesExpired(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.3")
	c := NewCache("n1", &fakeSource{feed: make(chan Event), broken: make(chan struct{})}, 0)
	c.live = true
	c.Put(Binding{Lease: "l-1", Addr: a, Expires: time.Now().Add(-time.Second)})
	if _, err := c.Lookup(context.Background(), a); !errors.Is(err, ErrUnknown) {
		t.Fatalf("expired lease = %v, want ErrUnknown", err)
	}
}

// Peek answers from the cache alone: a live binding, never an expired or unknown one, and never a
// store lookup.
func TestPeek(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")
	src := &fakeSource{bindings: map[netip.Addr]Binding{b: {Lease: "l-store", Addr: b, Expires: time.Now().Add(time.Hour)}}}
	c := NewCache("n1", src, 0)
	c.live = true
	c.Put(Binding{Lease: "l-1", Addr: a, Expires: time.Now().Add(time.Hour)})
	if got, ok := c.Peek(a); !ok || got.Lease != "l-1" {
		t.Fatalf("Peek of a cached binding: %+v %v", got, ok)
	}
	if _, ok := c.Peek(b); ok {
		t.Fatal("Peek answered from the store")
	}
	c.Put(Binding{Lease: "l-2", Addr: a, Expires: time.Now().Add(-time.Second), Version: 9})
	if _, ok := c.Peek(a); ok {
		t.Fatal("Peek served an expired binding")
	}
}

// A binding released between a miss's lookup and its put is never cached: the cache neither
// keeps nor serves what it read while the address changed, and a binding older than one it has
// heard of is not kept, whoever puts it.
func TestCacheNeverKeepsAReleasedBinding(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.4")
	set, _ := scope.Parse([]scope.Scope{{Host: "a.example"}})
	src := &fakeSource{bindings: map[netip.Addr]Binding{a: {Lease: "l-1", Addr: a, Expires: time.Now().Add(time.Hour), Scopes: set, Version: 5}}}
	c := NewCache("n1", src, 0)
	c.live = true
	release := func(how func()) func() {
		return func() {
			src.mu.Lock()
			delete(src.bindings, a)
			src.mu.Unlock()
			how()
		}
	}
	for name, how := range map[string]func(){
		"unbind event": func() { c.apply(Event{Addr: a, Lease: "l-1", Version: 6}) },
		"local delete": func() { c.Delete(a) },
		"resync":       func() { c.resync() },
	} {
		t.Run(name, func(t *testing.T) {
			src.mu.Lock()
			src.bindings[a] = Binding{Lease: "l-1", Addr: a, Expires: time.Now().Add(time.Hour), Scopes: set, Version: 5}
			src.during = release(how)
			src.mu.Unlock()
			c.mu.Lock()
			delete(c.entries, a)
			c.fences[a] = fence{}
			c.mu.Unlock()
			if b, err := c.Lookup(context.Background(), a); !errors.Is(err, ErrUnknown) {
				t.Fatalf("lookup racing a release = %+v, %v; want ErrUnknown", b, err)
			}
			c.mu.RLock()
			_, kept := c.entries[a]
			c.mu.RUnlock()
			if kept {
				t.Fatal("the released binding was cached")
			}
		})
	}
	// After an unbind at version 6, a put of version 5 (a late local bind, a slow fetch) is
	// not kept; version 7 is.
	c.apply(Event{Addr: a, Lease: "l-1", Version: 6})
	c.Put(Binding{Lease: "l-1", Addr: a, Expires: time.Now().Add(time.Hour), Version: 5})
	if _, err := c.Lookup(context.Background(), a); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a stale put was served: %v", err)
	}
	c.Put(Binding{Lease: "l-2", Addr: a, Expires: time.Now().Add(time.Hour), Version: 7})
	if b, err := c.Lookup(context.Background(), a); err != nil || b.Lease != "l-2" {
		t.Fatalf("a newer put: %+v %v", b, err)
	}
}

// waitLive waits up to 5s for the cache to say it follows the feed (live) or has lost it.
func waitLive(t *testing.T, c *Cache, live bool) {
	t.Helper()
	wait.For(t, 5*time.Second, fmt.Sprintf("the cache's Live() to be %v", live), func() bool { return c.Live() == live })
}
