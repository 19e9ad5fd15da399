package binding

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/gateway/scope"
)

// fakeSource is a Source whose feed the test opens and breaks.
type fakeSource struct {
	mu       sync.Mutex
	bindings map[netip.Addr]Binding
	lookups  int
	down     bool
	feed     chan Event
	broken   chan struct{}
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
	for !c.Live() {
		time.Sleep(time.Millisecond)
	}
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
	for c.Live() {
		time.Sleep(time.Millisecond)
	}
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
