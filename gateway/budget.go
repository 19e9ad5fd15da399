package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/rule"
)

// usage is what one lease has sent so far.
type usage struct {
	requests atomic.Int64
	bytesUp  atomic.Int64
	expires  atomic.Int64 // unix nanos of the lease's end, for pruning
}

// budgets tracks per-lease usage on this node (a lease is served by one node's gateway only).
type budgets struct {
	m sync.Map // lease id -> *usage
	n atomic.Int64
}

func (b *budgets) of(lease string, expires time.Time) *usage {
	if u, ok := b.m.Load(lease); ok {
		return u.(*usage)
	}
	u := &usage{}
	u.expires.Store(expires.UnixNano())
	actual, loaded := b.m.LoadOrStore(lease, u)
	if !loaded && b.n.Add(1)%1024 == 0 {
		b.prune()
	}
	return actual.(*usage)
}

// prune forgets leases that have ended.
func (b *budgets) prune() {
	now := time.Now().UnixNano()
	b.m.Range(func(k, v any) bool {
		if v.(*usage).expires.Load() < now {
			b.m.Delete(k)
			b.n.Add(-1)
		}
		return true
	})
}

// startRequest counts one request against x's lease and refuses it when the budget is spent,
// or when the body it announces (contentLength, -1 when unknown) is larger than what is left of
// the byte budget: refused before anything is sent.
func (p *Proxy) startRequest(x *exchange, contentLength int64) error {
	lim := p.dyn.Load().budget.Narrow(x.b.Budget)
	x.meter = &meter{lease: x.b.Lease}
	if lim == (budget.Budget{}) {
		return nil
	}
	u := p.budgets.of(x.b.Lease, x.b.Expires)
	x.meter.usage, x.meter.limit = u, lim.BytesUp
	if lim.Requests > 0 && u.requests.Add(1) > lim.Requests {
		return refuse(http.StatusTooManyRequests, rule.Budget,
			fmt.Sprintf("lease %s has used its budget of %d requests", x.b.Lease, lim.Requests),
			"a fresh lease, or a task token with a larger budget")
	}
	if lim.BytesUp > 0 {
		left := lim.BytesUp - u.bytesUp.Load()
		if left <= 0 {
			return refuse(http.StatusTooManyRequests, rule.Budget,
				fmt.Sprintf("lease %s has sent its budget of %d bytes upstream", x.b.Lease, lim.BytesUp),
				"a fresh lease, or a task token with a larger budget")
		}
		if contentLength > left {
			return refuse(http.StatusTooManyRequests, rule.Budget,
				fmt.Sprintf("lease %s has %d of its %d bytes upstream left, and this body is %d", x.b.Lease, left, lim.BytesUp, contentLength),
				"a fresh lease, or a task token with a larger budget")
		}
	}
	return nil
}

// meter counts what a sandbox sends upstream (a request body, an upgraded stream, a tunnel)
// and holds it to the lease's byte budget. It reserves budget before each read and reads no more
// than it got, so nothing over the budget is ever read from the sandbox, let alone sent, however
// many requests of the lease run at once. Safe for one reader at a time; n may be read
// concurrently.
type meter struct {
	usage *usage // nil: no budget, only counting
	limit int64  // bytes; zero means none
	lease string
	n     atomic.Int64
	// over is set when the sandbox had more to send than the budget allowed, so the proxy
	// answers 429 whatever error the transport wraps it in.
	over atomic.Pointer[Refusal]
}

// read reads from src into b, as much as the budget allows.
func (m *meter) read(src io.Reader, b []byte) (int, error) {
	if m.usage == nil || m.limit <= 0 || len(b) == 0 {
		n, err := src.Read(b)
		m.n.Add(int64(n))
		return n, err
	}
	got := m.usage.reserve(int64(len(b)), m.limit)
	if got == 0 {
		// Spent: one byte more says whether the sandbox had more to send. It is not passed on.
		var one [1]byte
		n, err := src.Read(one[:])
		if n == 0 {
			return 0, err
		}
		ref := refuse(http.StatusTooManyRequests, rule.Budget,
			fmt.Sprintf("lease %s went over its budget of %d bytes upstream", m.lease, m.limit), "")
		m.over.Store(ref)
		return 0, ref
	}
	n, err := src.Read(b[:got])
	if int64(n) < got {
		m.usage.bytesUp.Add(int64(n) - got)
	}
	m.n.Add(int64(n))
	return n, err
}

// reserve takes up to n bytes of a budget of limit and returns how many it got.
func (u *usage) reserve(n, limit int64) int64 {
	for {
		cur := u.bytesUp.Load()
		left := limit - cur
		if left <= 0 {
			return 0
		}
		take := min(n, left)
		if u.bytesUp.CompareAndSwap(cur, cur+take) {
			return take
		}
	}
}

// meteredBody is a request body read through a meter.
type meteredBody struct {
	io.ReadCloser
	m *meter
}

func (b *meteredBody) Read(p []byte) (int, error) { return b.m.read(b.ReadCloser, p) }

// meteredConn is a sandbox connection whose reads (what it sends upstream) go through a meter:
// an upgraded stream or a tunnel.
type meteredConn struct {
	net.Conn
	m *meter
}

func (c *meteredConn) Read(p []byte) (int, error) { return c.m.read(c.Conn, p) }
