package slots

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Conns are the bounds of a Listener: connections counted from accept to close, before anything
// on them is authenticated, so they are counted by the address they come from.
type Conns struct {
	// Max is how many connections the listener holds at once.
	Max int
	// PerAddress is how many of them one address holds: an IPv4 address, or an IPv6 address's
	// /64 (the block one host is given, whose every address it may use). Less than Max, so no
	// address holds them all. Behind a proxy every client is the proxy's address.
	PerAddress int
}

// Listener bounds the connections a net.Listener hands out, per address and in all. A
// connection past a bound is still handed out, marked refused: Server answers its first request
// 429 naming the bound and closes it (its handshake and headers bounded by Timeouts.Header, as
// every connection's are). At most PerAddress refused connections are held at once, all
// addresses together; past that one is closed unanswered. So the listener holds at most
// Max+PerAddress connections, whoever opens them. Safe for concurrent use.
type Listener struct {
	net.Listener
	limits   Conns
	setting  string // names the bounds in refusals: "api.connections"
	held     *Set
	refusing atomic.Int64 // refused connections still open
}

// Limit bounds ln by c; setting is where c is configured ("api.connections"), named in
// refusals. Callers validate c; see New for how a Set takes bounds outside their range.
func Limit(ln net.Listener, c Conns, setting string) *Listener {
	return &Listener{Listener: ln, limits: c, setting: setting, held: New(Limits{Max: c.Max, PerIdentity: c.PerAddress})}
}

// Accept returns the next connection, holding a slot of its address until it is closed, or
// marked refused when its address or the listener holds all it may.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := Address(c.RemoteAddr())
		release, err := l.held.Take(addr, false)
		if err == nil {
			return &heldConn{Conn: c, release: release}, nil
		}
		if l.refusing.Add(1) > int64(l.limits.PerAddress) {
			l.refusing.Add(-1)
			c.Close()
			continue
		}
		return &refusedConn{Conn: c, why: l.refusal(addr, err), done: func() { l.refusing.Add(-1) }}, nil
	}
}

// Held returns how many connections addr holds (an Address).
func (l *Listener) Held(addr string) int { return l.held.Held(addr) }

// refusal says which bound refused a connection from addr, naming its setting.
func (l *Listener) refusal(addr string, err error) string {
	if bound(err) == PerIdentity {
		return fmt.Sprintf("%s already holds %d connections to this listener, the most one address may (%s.per_address); close idle ones, or retry when one closes",
			addr, l.limits.PerAddress, l.setting)
	}
	return fmt.Sprintf("this listener already holds %d connections, the most it holds at once (%s.max); retry when one closes", l.limits.Max, l.setting)
}

// Address is the address a connection is counted under: the IP of an IPv4 peer (or of an
// IPv4-mapped IPv6 one), the /64 of an IPv6 peer, or the whole address of anything else.
func Address(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.WithZone("").Prefix(64)
	return p.String()
}

// heldConn gives its address's slot back when it is closed.
type heldConn struct {
	net.Conn
	release func()
}

func (c *heldConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// refusedConn is a connection past a bound, whose requests are answered with why.
type refusedConn struct {
	net.Conn
	why  string
	once sync.Once
	done func()
}

func (c *refusedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

type refusedKey struct{}

// connContext marks the context of a refused connection's requests with why it was refused.
// It is http.Server.ConnContext: the one way the server gives a request its connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	for {
		switch v := c.(type) {
		case *refusedConn:
			return context.WithValue(ctx, refusedKey{}, v.why)
		case interface{ NetConn() net.Conn }: // a *tls.Conn
			c = v.NetConn()
		default:
			return ctx
		}
	}
}

// refused returns why the connection a request came on was refused, or "".
func refused(ctx context.Context) string {
	why, _ := ctx.Value(refusedKey{}).(string)
	return why
}
