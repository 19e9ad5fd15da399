package gateway

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/gateway/scope"
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

// startRequest counts one request against x's lease and refuses it when the budget is spent.
func (p *Proxy) startRequest(x *exchange) error {
	lim := p.dyn.Load().budget.Narrow(x.b.Budget)
	if lim == (scope.Budget{}) {
		return nil
	}
	u := p.budgets.of(x.b.Lease, x.b.Expires)
	x.usage, x.limit = u, lim
	if lim.Requests > 0 && u.requests.Add(1) > lim.Requests {
		return refuse(http.StatusTooManyRequests, RuleBudget,
			fmt.Sprintf("lease %s has used its budget of %d requests", x.b.Lease, lim.Requests),
			"a fresh lease, or a task token with a larger budget")
	}
	if lim.BytesUp > 0 && u.bytesUp.Load() >= lim.BytesUp {
		return refuse(http.StatusTooManyRequests, RuleBudget,
			fmt.Sprintf("lease %s has sent its budget of %d bytes upstream", x.b.Lease, lim.BytesUp),
			"a fresh lease, or a task token with a larger budget")
	}
	return nil
}

// meteredBody counts request body bytes, against the lease's byte budget when it has one.
type meteredBody struct {
	io.ReadCloser
	n     int64
	usage *usage
	limit int64
	lease string
	// over is set when the body went over the budget, so the proxy answers 429 whatever error
	// the transport wraps it in.
	over *Refusal
}

func (m *meteredBody) Read(b []byte) (int, error) {
	n, err := m.ReadCloser.Read(b)
	m.n += int64(n)
	if m.usage != nil && n > 0 {
		if total := m.usage.bytesUp.Add(int64(n)); m.limit > 0 && total > m.limit {
			m.over = refuse(http.StatusTooManyRequests, RuleBudget,
				fmt.Sprintf("lease %s went over its budget of %d bytes upstream", m.lease, m.limit), "")
			return n, m.over
		}
	}
	return n, err
}
