package gateway

import (
	"context"
	"io"
	"net/netip"
	"sync"
	"time"
)

// openConn is a long-lived connection from a sandbox: a raw tunnel, an intercepted session, or
// the stream of a request whose protocol was switched (a WebSocket), held while the lease allows
// it (see Proxy.holds).
type openConn struct {
	src    netip.Addr
	lease  string
	host   string
	port   int
	tunnel bool
	// method and path are the request of a switched stream, which is held as that request is
	// decided; empty for a tunnel or a session, held as a connection to host:port is.
	method string
	path   string
	bearer string // the token a client outside the pool identified with
	closer io.Closer
}

// conns tracks open connections so that a release, expiry or token swap closes the ones the
// lease's current binding no longer allows, within recheckEvery.
type conns struct {
	mu sync.Mutex
	m  map[*openConn]struct{}
}

const recheckEvery = 500 * time.Millisecond

func (c *conns) add(oc *openConn) func() {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[*openConn]struct{}{}
	}
	c.m[oc] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.m, oc)
		c.mu.Unlock()
	}
}

func (c *conns) snapshot() []*openConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*openConn, 0, len(c.m))
	for oc := range c.m {
		out = append(out, oc)
	}
	return out
}

// recheck closes every open connection whose lease is gone, replaced, or whose scopes no longer
// allow it.
func (p *Proxy) recheck(ctx context.Context) {
	d := p.dyn.Load()
	for _, oc := range p.open.snapshot() {
		if !p.holds(ctx, d, oc) {
			oc.closer.Close()
		}
	}
}

// holds reports whether oc's lease still allows it, decided as it was opened: its client
// identified as a request is (whoIs), its destination by allow. A tunnel needs a tunnel scope
// and a session one without; a switched stream needs what its request would need now.
func (p *Proxy) holds(ctx context.Context, d *dynamic, oc *openConn) bool {
	b, _, err := p.whoIs(ctx, oc.src, oc.bearer)
	if err != nil || b.Lease != oc.lease {
		return false
	}
	g, err := d.allow(b, oc.host, oc.port, oc.method, oc.path)
	if err != nil {
		return false
	}
	return oc.method != "" || g.scope.Tunnel == oc.tunnel
}

// runRecheck rechecks open connections until ctx ends.
func (p *Proxy) runRecheck(ctx context.Context) {
	t := time.NewTicker(recheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.recheck(ctx)
			p.transports.prune(ctx, func(lease string) bool { return p.leaseLive(ctx, lease) })
		}
	}
}

// leaseLive reports whether some open connection still belongs to lease: mTLS transports are
// kept while their lease has connections, and rebuilt on demand after.
func (p *Proxy) leaseLive(_ context.Context, lease string) bool {
	for _, oc := range p.open.snapshot() {
		if oc.lease == lease {
			return true
		}
	}
	return false
}
