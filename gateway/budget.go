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

// startRequest counts one request of x's lease and reserves its head (headSize of r) against
// the lease's byte budget, refusing when either is spent, or when the head, with the body r
// announces (ContentLength), is more than what is left: refused before anything is sent. The
// head is reserved all or nothing, so requests of one lease racing each other never pass the
// check together on what only one of them may spend. r is nil for a redirected TLS tunnel:
// every byte of it, the ClientHello with its server name too, goes through the meter.
func (p *Proxy) startRequest(x *exchange, r *http.Request) error {
	lim := p.meterBudget(x)
	if lim.Requests > 0 && x.meter.usage != nil && x.meter.usage.requests.Add(1) > lim.Requests {
		return refuse(http.StatusTooManyRequests, rule.Budget,
			fmt.Sprintf("lease %s has used its budget of %d requests", x.b.Lease, lim.Requests),
			"a fresh lease, or a task token with a larger budget")
	}
	if r == nil {
		return x.meter.reserveHead(0, -1)
	}
	x.meter.trailer = &r.Trailer
	return x.meter.reserveHead(headSize(r), r.ContentLength)
}

// reserveSession reserves the head of what opens an intercepted session (a CONNECT, or the
// server name of a redirected TLS connection, as the CONNECT it stands for) against x's lease's
// byte budget. The first request of the session that is sent carries it (commit), in its record
// too; a session that sends nothing gets it back when it ends (release).
func (p *Proxy) reserveSession(x *exchange, head int64) error {
	p.meterBudget(x)
	return x.meter.reserveHead(head, -1)
}

// meterBudget points x's meter at its lease's usage and returns the lease's budget in force:
// the operator's, narrowed by the token's.
func (p *Proxy) meterBudget(x *exchange) budget.Budget {
	lim := p.dyn.Load().budget.Narrow(x.b.Budget)
	x.meter.lease = x.b.Lease
	if lim != (budget.Budget{}) && x.b.Lease != "" {
		x.meter.usage, x.meter.limit = p.budgets.of(x.b.Lease, x.b.Expires), lim.BytesUp
	}
	return lim
}

// headSize is the size of a request head as the sandbox sent it, the one measure of a head for
// the budget and the records alike. It is counted from what the server read, the same way
// whatever the request came in (HTTP/1.1; HTTP/2 with its fields decoded from HPACK; a CONNECT):
//
//	request line     method SP target SP "HTTP/1.1" CRLF   the target as sent, query and all
//	Host             "Host: " host CRLF                     HTTP/2's :authority
//	each field       name ": " value CRLF                   every value of a repeated header
//	trailer names    "Trailer: " names joined by ", " CRLF  when trailers are announced
//	transfer coding  "Transfer-Encoding: " coding CRLF
//	end              CRLF
//
// Values count as read: without the whitespace around them, which never goes on. The trailers'
// values are counted when the body ends (meter.read). It allocates nothing.
func headSize(r *http.Request) int64 {
	n := len(r.Method) + 1 + len(r.RequestURI) + len(" HTTP/1.1\r\n")
	n += fieldSize("Host", r.Host)
	n += fieldsSize(r.Header)
	if len(r.Trailer) > 0 {
		n += len("Trailer: \r\n") - len(", ")
		for k := range r.Trailer {
			n += len(k) + len(", ")
		}
	}
	for _, te := range r.TransferEncoding {
		n += fieldSize("Transfer-Encoding", te)
	}
	return int64(n + len("\r\n"))
}

// fieldsSize is the size of h's fields, each value on its own line: "name: value\r\n".
func fieldsSize(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += fieldSize(k, v)
		}
	}
	return n
}

func fieldSize(name, value string) int { return len(name) + len(": ") + len(value) + len("\r\n") }

// meter counts what a sandbox sends upstream (a request's head and body, an upgraded stream, a
// tunnel) and holds it to the lease's byte budget. It reserves budget before each read and
// reads no more than it got, so nothing over the budget is ever read from the sandbox, let
// alone sent, however many requests of the lease run at once. A head is read before any of
// that: its size is reserved whole when the request is admitted (reserveHead), held while
// nothing of it has gone upstream, charged when the request is sent (commit), and given back
// if the exchange ends without sending it (release): a request refused after admission (an
// approval pending, a name that resolves only to private addresses) costs no bytes. Safe for
// one reader at a time; n may be read concurrently, and commit and release called from the
// exchange's own goroutine.
type meter struct {
	usage *usage // nil: no budget, only counting
	limit int64  // bytes; zero means none
	lease string
	// n is what the exchange has sent upstream: its head once sent, and what was read
	// through the meter. Its records' bytes up.
	n atomic.Int64
	// held is the head reserved and not yet sent.
	held atomic.Int64
	// session is the meter of the intercepted session a request came in, whose held head
	// (the CONNECT's) the first request of the session that is sent takes on.
	session *meter
	// trailer is the request's trailers, filled by the server when the body ends, where they
	// are charged; nil when there are none to read.
	trailer *http.Header
	// over is set when the sandbox had more to send than the budget allowed, so the proxy
	// answers 429 whatever error the transport wraps it in.
	over atomic.Pointer[Refusal]
}

// reserveHead reserves head bytes of the budget, all or nothing, for a request whose body is
// body bytes (-1 when unknown): refused when the head and that body are more than what is left.
// The body is reserved only as it is read.
func (m *meter) reserveHead(head, body int64) error {
	if !m.bounded() {
		m.held.Add(head)
		return nil
	}
	left, ok := m.usage.reserveAll(head, max(body, 0), m.limit)
	switch {
	case ok:
		m.held.Add(head)
		return nil
	case left <= 0:
		return refuse(http.StatusTooManyRequests, rule.Budget,
			fmt.Sprintf("lease %s has sent its budget of %d bytes upstream", m.lease, m.limit),
			"a fresh lease, or a task token with a larger budget")
	case head > left:
		return refuse(http.StatusTooManyRequests, rule.Budget,
			fmt.Sprintf("lease %s has %d of its %d bytes upstream left, and this request's head is %d", m.lease, left, m.limit, head),
			"a fresh lease, or a task token with a larger budget")
	}
	return refuse(http.StatusTooManyRequests, rule.Budget,
		fmt.Sprintf("lease %s has %d of its %d bytes upstream left, and this request is %d (a head of %d and a body of %d)",
			m.lease, left, m.limit, head+body, head, body),
		"a fresh lease, or a task token with a larger budget")
}

// commit charges the held head (and the session's, if this is the first request of its
// session to be sent) to what the exchange sent: called as the request goes upstream.
func (m *meter) commit() {
	m.n.Add(m.held.Swap(0))
	if m.session != nil {
		m.n.Add(m.session.held.Swap(0))
	}
}

// release gives a head held and never sent back to the budget: called when the exchange ends.
func (m *meter) release() {
	if k := m.held.Swap(0); k != 0 && m.bounded() {
		m.usage.bytesUp.Add(-k)
	}
}

// bounded reports whether the meter holds to a byte budget (else it only counts).
func (m *meter) bounded() bool { return m.usage != nil && m.limit > 0 }

// read reads from src into b, as much as the budget allows; at the end of a request body, the
// trailers that came with it are charged, or the body is cut there.
func (m *meter) read(src io.Reader, b []byte) (int, error) {
	n, err := m.readBudget(src, b)
	if err == io.EOF && m.trailer != nil {
		t := m.trailer
		m.trailer = nil
		if ref := m.charge(int64(fieldsSize(*t))); ref != nil {
			return n, ref
		}
	}
	return n, err
}

func (m *meter) readBudget(src io.Reader, b []byte) (int, error) {
	if !m.bounded() || len(b) == 0 {
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
		return 0, m.wentOver()
	}
	n, err := src.Read(b[:got])
	if int64(n) < got {
		m.usage.bytesUp.Add(int64(n) - got)
	}
	m.n.Add(int64(n))
	return n, err
}

// charge takes k bytes the sandbox has sent (a body's trailers) all or nothing, or refuses them.
func (m *meter) charge(k int64) error {
	if k == 0 {
		return nil
	}
	if m.bounded() {
		if _, ok := m.usage.reserveAll(k, 0, m.limit); !ok {
			return m.wentOver()
		}
	}
	m.n.Add(k)
	return nil
}

// wentOver is the refusal of a sandbox that had more to send than its budget allowed.
func (m *meter) wentOver() *Refusal {
	ref := refuse(http.StatusTooManyRequests, rule.Budget,
		fmt.Sprintf("lease %s went over its budget of %d bytes upstream", m.lease, m.limit), "")
	m.over.Store(ref)
	return ref
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

// reserveAll takes n bytes of a budget of limit if n and then also more are left, and reports
// whether it did, with what was left when it looked. Nothing is taken from a spent budget.
func (u *usage) reserveAll(n, also, limit int64) (left int64, ok bool) {
	for {
		cur := u.bytesUp.Load()
		left = limit - cur
		if left <= 0 || n > left || also > left-n {
			return left, false
		}
		if u.bytesUp.CompareAndSwap(cur, cur+n) {
			return left, true
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
