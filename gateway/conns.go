package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
)

// hold is what the gateway keeps going of a sandbox's on a decision made once, held while the
// lease allows it (see Proxy.refuses): a raw tunnel or an intercepted session, decided as a
// connection to host:port; or a request, from its decision until its answer has been relayed
// and its body read, and on as its stream once its protocol is switched (a WebSocket), decided
// as that request. It is part of its exchange (exchange.held), so holding allocates nothing.
//
// The fields up to mu say what is held; they are set before it is taken (holds.take) and never
// changed after, as the recheck reads them from its own goroutine. The rest is guarded by mu.
type hold struct {
	src    netip.Addr
	lease  string
	host   string
	port   int
	tunnel bool
	// method and path are a request's (and its switched stream's), which is held as that request
	// is decided; empty for a tunnel or a session, held as a connection to host:port is.
	method string
	path   string
	// credential is the one a request's scope injects ("" for none): a request is held to the
	// credential it goes upstream with, not only to its path.
	credential string
	bearer     string // the token a client outside the pool identified with

	mu sync.Mutex
	// done: released, nothing is left to cut; the request's handler may have returned, and its
	// writer must not be touched.
	done bool
	why  *Refusal // why the recheck cut it; nil while it has not
	// conn is closed by a cut: a tunnel's, a session's or a switched stream's connection.
	conn io.Closer
	// w and cancel are a request's until its protocol is switched: a cut ends its stream to the
	// sandbox (past deadlines: an HTTP/1 connection's, an HTTP/2 stream's alone) and cancels the
	// context of what it sent upstream.
	w      http.ResponseWriter
	cancel context.CancelFunc
}

// connection sets what h holds to x's connection to its destination (a tunnel when tunnel),
// closed by closing conn.
func (h *hold) connection(x *exchange, tunnel bool, conn io.Closer) *hold {
	h.src, h.lease, h.host, h.port, h.tunnel, h.bearer, h.conn = x.src, x.b.Lease, x.host, x.port, tunnel, x.bearer, conn
	return h
}

// request sets what h holds to x's request, answered through w and sent upstream under a
// context that cancel ends.
func (h *hold) request(x *exchange, w http.ResponseWriter, cancel context.CancelFunc) *hold {
	h.src, h.lease, h.host, h.port, h.method, h.path, h.bearer = x.src, x.b.Lease, x.host, x.port, x.method, x.path, x.bearer
	h.credential = x.scope.Credential
	h.w, h.cancel = w, cancel
	return h
}

// pastDeadline is a deadline that has passed: set, it fails reads or writes under way at once.
var pastDeadline = time.Unix(1, 0)

// cut ends what h holds, once, recording why; it does nothing once h is released.
func (h *hold) cut(why *Refusal) {
	h.mu.Lock()
	if h.done || h.why != nil {
		h.mu.Unlock()
		return
	}
	h.why = why
	if h.cancel != nil {
		h.cancel()
	}
	if h.conn == nil && h.w != nil {
		// Under mu: once released, the writer may belong to a finished handler. The handler,
		// unblocked, sees the cut at its release and aborts (see Proxy.forward).
		rc := http.NewResponseController(h.w)
		rc.SetReadDeadline(pastDeadline)
		rc.SetWriteDeadline(pastDeadline)
	}
	conn := h.conn
	h.mu.Unlock()
	if conn != nil {
		// The connection under any TLS: closing a *tls.Conn writes its close alert first, for
		// up to 5 s when the sandbox stops reading (a stream switched inside an intercepted
		// session), and this is the recheck's goroutine, which cuts every hold of the node in
		// turn; meanwhile the stream would go on both ways. Closed underneath, it ends at once,
		// without an alert, and its owner's own Close after returns at once too.
		rawConn(conn).Close()
	}
}

// wrappedConn is a connection carried over another (TLS, the framing check, bytes read ahead).
type wrappedConn interface {
	NetConn() net.Conn
}

var (
	_ wrappedConn = (*tls.Conn)(nil)
	_ wrappedConn = (*framingConn)(nil)
	_ wrappedConn = (*bufferedConn)(nil)
)

// rawConn is the connection at the bottom of c, what the network carries; c itself if it wraps
// none.
func rawConn(c io.Closer) io.Closer {
	for {
		w, ok := c.(wrappedConn)
		if !ok {
			return c
		}
		c = w.NetConn()
	}
}

// switched hands h over from its request to the stream its protocol was switched to: a cut
// closes conn from now on. conn is closed at once if h was cut already.
func (h *hold) switched(conn io.Closer) {
	h.mu.Lock()
	h.conn, h.w = conn, nil
	cut := h.why != nil
	h.mu.Unlock()
	if cut {
		conn.Close()
	}
}

// cutBy is why the recheck cut h, or nil.
func (h *hold) cutBy() *Refusal {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.why
}

// holds is every hold of the gateway, so that a release, expiry or token swap ends the ones the
// lease's current binding no longer allows, within recheckEvery. It is sharded by the client's
// address: a request takes and releases its hold under its own sandbox's lock, never one all
// requests share. The zero value is ready to use.
type holds struct {
	shards [holdShards]holdShard
}

const holdShards = 16

type holdShard struct {
	mu sync.Mutex
	m  map[*hold]struct{}
	_  [40]byte // a cache line of its own
}

const recheckEvery = 500 * time.Millisecond

func (hs *holds) shard(h *hold) *holdShard {
	a := h.src.As16()
	return &hs.shards[(a[14]^a[15])%holdShards]
}

// take adds h, whose identifying fields are set.
func (hs *holds) take(h *hold) {
	s := hs.shard(h)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[*hold]struct{}{}
	}
	s.m[h] = struct{}{}
	s.mu.Unlock()
}

// release removes h: it is no longer cut, and a request's context is cancelled (its round
// trip is over). It reports whether the recheck cut h before.
func (hs *holds) release(h *hold) (cut bool) {
	s := hs.shard(h)
	s.mu.Lock()
	delete(s.m, h)
	s.mu.Unlock()
	h.mu.Lock()
	h.done = true
	cut = h.why != nil
	cancel := h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return cut
}

func (hs *holds) snapshot() []*hold {
	var out []*hold
	for i := range hs.shards {
		s := &hs.shards[i]
		s.mu.Lock()
		for h := range s.m {
			out = append(out, h)
		}
		s.mu.Unlock()
	}
	return out
}

// Ended rechecks at once what client src holds: a node calls it when it has unbound a lease of
// src, so that the lease's requests and connections are cut, and recorded as cut, before its
// sandbox goes (the tick would, within recheckEvery; by then the sandbox may be gone, and what
// it held ended as if the sandbox had hung up).
func (p *Proxy) Ended(ctx context.Context, src netip.Addr) {
	src = src.Unmap()
	p.recheckWhere(ctx, func(h *hold) bool { return h.src == src })
}

// recheck cuts every hold whose lease is gone, replaced, or whose scopes no longer allow it.
// Requests are cut before connections: a request inside a session closed in the same pass is
// recorded with why it was cut, not as a connection that went away under it.
func (p *Proxy) recheck(ctx context.Context) { p.recheckWhere(ctx, nil) }

// recheckWhere is recheck of the holds only (nil: all) selects.
func (p *Proxy) recheckWhere(ctx context.Context, only func(*hold) bool) {
	d := p.dyn.Load()
	type client struct {
		src    netip.Addr
		bearer string
	}
	type identity struct {
		b   binding.Binding
		err error
	}
	known := map[client]identity{} // one lookup per client and pass, however much it holds
	who := func(src netip.Addr, bearer string) (binding.Binding, error) {
		k := client{src, bearer}
		id, ok := known[k]
		if !ok {
			id.b, _, id.err = p.whoIs(ctx, src, bearer)
			known[k] = id
		}
		return id.b, id.err
	}
	held := p.held.snapshot()
	for _, requests := range []bool{true, false} {
		for _, h := range held {
			if (h.method != "") != requests || only != nil && !only(h) {
				continue
			}
			if why := p.refuses(d, h, who); why != nil {
				h.cut(why)
			}
		}
	}
}

// refuses decides h again as it was decided when taken, and returns why its lease no longer
// allows it (the refusal its record keeps), or nil. Its client is identified as a request is
// (whoIs, through who), its destination decided by allow: a tunnel needs a tunnel scope and a
// session one without; a request, and its switched stream, what the request would need now.
func (p *Proxy) refuses(d *dynamic, h *hold, who func(netip.Addr, string) (binding.Binding, error)) *Refusal {
	b, err := who(h.src, h.bearer)
	if err == nil && b.Lease != h.lease {
		err = fmt.Errorf("%w: lease %s has ended", binding.ErrUnknown, h.lease)
	}
	if err == nil {
		var g grant
		g, err = d.allow(b, h.host, h.port, h.method, h.path)
		if err == nil && h.method != "" && g.scope.Credential != h.credential {
			err = refuse(http.StatusForbidden, rule.ScopeMiss,
				fmt.Sprintf("task %s's scope %s no longer injects credential %q, which %s %s%s carries", b.Task, g.scope,
					h.credential, h.method, hostPort(h.host, h.port), h.path), "")
		}
		if err == nil && h.method == "" && g.scope.Tunnel != h.tunnel {
			what := "an intercepted session"
			if h.tunnel {
				what = "a tunnel"
			}
			err = refuse(http.StatusForbidden, rule.ScopeMiss,
				fmt.Sprintf("task %s's scope %s no longer allows %s to %s", b.Task, g.scope, what, hostPort(h.host, h.port)), "")
		}
	}
	if err == nil {
		return nil
	}
	ref := refusalFor(err)
	return &Refusal{Status: ref.Status, Rule: ref.Rule, Reason: "cut by the recheck: " + ref.Reason, Detail: ref.Detail,
		Flagged: ref.Flagged, Err: err}
}

// redecide decides what x holds once more, as the recheck would decide it now (refuses, its
// client identified by whoIs, its destination by allow): nil, or the refusal the recheck's cut
// would record. x.held must be taken first. What its decision allowed may have been taken away
// before the hold was (a request's body read, a reviewer's answer, a tunnel's dial came in
// between), and no recheck saw it: redecide does; whatever changes after is the recheck's.
func (p *Proxy) redecide(ctx context.Context, x *exchange) *Refusal {
	return p.refuses(p.dyn.Load(), &x.held, func(src netip.Addr, bearer string) (binding.Binding, error) {
		b, _, err := p.whoIs(ctx, src, bearer)
		return b, err
	})
}

// runRecheck rechecks holds until ctx ends.
func (p *Proxy) runRecheck(ctx context.Context) {
	t := time.NewTicker(recheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.recheck(ctx)
			var held map[string]bool // walked once, when prune first asks: after it marked its transports
			p.transports.prune(func(lease string) bool {
				if held == nil {
					held = p.held.leases()
				}
				return held[lease]
			})
		}
	}
}

// leases is the set of leases something held belongs to: mTLS transports are kept while their
// lease has connections or requests, and rebuilt on demand after.
func (hs *holds) leases() map[string]bool {
	out := map[string]bool{}
	for i := range hs.shards {
		s := &hs.shards[i]
		s.mu.Lock()
		for h := range s.m {
			out[h.lease] = true
		}
		s.mu.Unlock()
	}
	return out
}
