package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// serveConnect answers a CONNECT: an intercepted TLS session for ordinary scopes, or a raw
// tunnel for scopes marked tunnel.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request, x *exchange) {
	if err := p.target(x, "https", r.Host, 0); err != nil || x.port == 0 {
		p.deny(w, x, refuse(http.StatusBadRequest, rule.BadRequest, "CONNECT needs host:port", ""))
		return
	}
	g, err := p.dyn.Load().allow(x.b, x.host, x.port, "", "")
	if err != nil {
		p.deny(w, x, err)
		return
	}
	x.take(g)
	if g.scope.Tunnel {
		p.tunnel(w, r, x)
		return
	}
	if err := p.reserveSession(x, headSize(r)); err != nil {
		p.deny(w, x, err)
		return
	}
	conn, err := hijack(w)
	if err != nil {
		p.log.Error("hijack failed", "err", err)
		return
	}
	p.intercept(r.Context(), conn, r.RemoteAddr, x, true)
}

// sandboxCurves are the key exchanges an interception offers a sandbox of the node: X25519 and
// P-256, not the hybrid post-quantum X25519MLKEM768 that Go clients put first. That connection
// runs from the sandbox to the gateway on the node's own bridge, where no one records it to
// break later, while ML-KEM was 37 % of the gateway's CPU for a new connection. A client outside
// the pool (identified by a task token) may come over a network, so it gets Go's defaults, the
// hybrid first, as do the gateway's own connections upstream.
var sandboxCurves = []tls.CurveID{tls.X25519, tls.CurveP256}

func curvesFor(x *exchange) []tls.CurveID {
	if x.bearer != "" {
		return nil
	}
	return sandboxCurves
}

// intercept terminates the sandbox's TLS on conn with a certificate for x.host from the
// deployment CA, after checking that the server name it asks for is x.host, and serves the
// requests inside, each decided on its own (serveIntercepted), the first one sent carrying the
// head x.meter holds for the session. granted says that x's lease allows the session (allow
// granted x.host:x.port a scope without Tunnel). It returns when the connection is done.
func (p *Proxy) intercept(ctx context.Context, conn net.Conn, remote string, x *exchange, granted bool) {
	host, port := x.host, x.port
	// A session its lease allows is closed when that stops being so. One it never allowed (only a
	// redirected connection can be: CONNECT refuses those before this) carries nothing but
	// refusals, each decided on its own; closing it under the recheck would cut them off unsent.
	// A protocol switched inside it is held on its own (switchProtocols), whichever it is: the
	// session stops being served, and held, once the stream takes its connection over.
	if granted && x.b.Lease != "" {
		p.held.take(x.held.connection(x, false, conn))
		defer p.held.release(&x.held)
	}
	var sniErr error
	tconn := tls.Server(conn, &tls.Config{
		MinVersion:       tls.VersionTLS12,
		NextProtos:       []string{"h2", "http/1.1"},
		CurvePreferences: curvesFor(x),
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			var sni string
			var err error
			if hello.ServerName != "" {
				sni, err = scope.CanonicalHost(hello.ServerName)
			}
			// A client may omit SNI only for an IP-literal CONNECT; a name it sends is the host's,
			// and one that is no host name at all is not taken for an omitted one.
			if err != nil || sni != host && !(hello.ServerName == "" && isIP(host)) {
				sniErr = fmt.Errorf("TLS server name %q does not match CONNECT host %q", hello.ServerName, host)
				return nil, sniErr
			}
			return p.cfg.CA.Leaf(host)
		},
	})
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := tconn.HandshakeContext(hctx)
	cancel()
	if err != nil {
		tconn.Close()
		if sniErr != nil {
			x.refusal = refuse(http.StatusForbidden, rule.HostMismatch, sniErr.Error(), "")
			x.status = http.StatusForbidden
			p.record(x)
		}
		return
	}
	// The handshake is done, so the server sees the negotiated protocol and speaks HTTP/2 when
	// the sandbox asked for it (HTTP/2 framing is unambiguous; HTTP/1 goes through the framing
	// check). Serve returns once the connection is closed or hijacked.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serveIntercepted(w, r, host, port, x.bearer, x.dest, x.meter)
	})
	if tconn.ConnectionState().NegotiatedProtocol != "h2" {
		newH1Server(h, p.log).ServeConn(newFramingConn(tconn, func(reason string) { p.recordFraming(remote, x, reason) }))
		return
	}
	serveOne(tconn, h, serverProtocols)
}

// serveOne serves HTTP/2 on the single connection c, an intercepted session that negotiated
// it, until it is closed. HTTP/1 connections are served by h1Server.
func serveOne(c net.Conn, h http.Handler, protocols *http.Protocols) {
	l := newConnListener(c)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				l.Close()
			}
		},
		Protocols: protocols,
	}
	srv.Serve(l)
}

// serverProtocols are what intercepted sessions speak towards the sandbox.
var serverProtocols = func() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	return &p
}()

// serveIntercepted handles one request inside an intercepted CONNECT. Every request is checked
// again: the lease may have ended, and Host must name the CONNECT target. session is the meter
// of the session's opening (see reserveSession).
func (p *Proxy) serveIntercepted(w http.ResponseWriter, r *http.Request, host string, port int, bearer, dest string, session *meter) {
	x := newExchange(r)
	defer x.meter.release()
	x.dest, x.meter.session = dest, session
	if err := p.identify(r, x, bearer); err != nil {
		p.deny(w, x, err)
		return
	}
	x.scheme, x.host, x.port = "https", host, port
	if r.Method == http.MethodConnect {
		// A tunnel inside the intercepted session (HTTP/1 CONNECT, or HTTP/2's extended
		// CONNECT) would carry bytes no request check sees.
		p.deny(w, x, refuse(http.StatusBadRequest, rule.BadRequest,
			"CONNECT inside an intercepted session is not allowed", "open a tunnel with CONNECT to the gateway itself, under a tunnel scope"))
		return
	}
	h, hp, err := splitHostPort(r.Host, 443)
	if err != nil || h != host || hp != port {
		p.deny(w, x, refuse(http.StatusForbidden, rule.HostMismatch,
			fmt.Sprintf("Host header %q does not match CONNECT target %s:%d", r.Host, host, port), ""))
		return
	}
	p.forward(w, r, x)
}

// tunnel splices an uninspected connection to the vetted upstream address. It follows the rules
// every request does: nothing opens while the trail refuses records or the lease's budget is
// spent, the tunnel is recorded when it opens (so a crash cannot lose it) and again when it
// closes, and what the sandbox sends through it counts against the byte budget, which closes
// the tunnel when it runs out.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, x *exchange) {
	up, err := p.openTunnel(r.Context(), x, r)
	if err != nil {
		p.deny(w, x, err)
		return
	}
	conn, err := hijack(w)
	if err != nil {
		p.held.release(&x.held)
		up.Close()
		return
	}
	p.runTunnel(x, conn, up)
}

// openTunnel makes the checks a tunnel opens under and dials its vetted upstream address. r is
// the CONNECT, whose head is reserved with the rest of the budget; nil for a redirected
// connection, which sent none.
func (p *Proxy) openTunnel(ctx context.Context, x *exchange, r *http.Request) (net.Conn, error) {
	if err := p.auditOK(); err != nil {
		return nil, err
	}
	if err := p.guardName(x); err != nil {
		return nil, err
	}
	if err := p.startRequest(x, r); err != nil {
		return nil, err
	}
	_, host, port := x.sendTo() // x.mirror is allow's, set with x.scope
	ap, err := p.dial.vet(ctx, host, port, p.recordLookup(x))
	if err != nil {
		return nil, err
	}
	up, err := p.cfg.Dialer.DialContext(ctx, "tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", ap, err)
	}
	x.upstream = ap.String()
	// Held from here, its upstream connection closed by a cut (which ends the splice both
	// ways), and decided once more: the lookup and the dial came between its decision and
	// its hold, and no recheck saw what changed meanwhile. Nothing of the sandbox's has gone
	// through yet. runTunnel releases it.
	p.held.take(x.held.connection(x, true, up))
	if why := p.redecide(ctx, x); why != nil {
		p.held.release(&x.held)
		up.Close()
		x.event = audit.EventCut
		return nil, why
	}
	return up, nil
}

// runTunnel records the tunnel's opening (unrecorded means not opened), splices conn and up,
// and records its close, whose bytes up are the CONNECT's head and what went through. up is
// held (openTunnel); runTunnel releases it.
func (p *Proxy) runTunnel(x *exchange, conn, up net.Conn) {
	x.status, x.event = http.StatusOK, audit.EventOpen
	if err := p.record(x); err != nil {
		p.held.release(&x.held)
		conn.Close()
		up.Close()
		return
	}
	x.meter.commit()
	p.tunnels.Add(1)
	defer p.tunnels.Add(-1)
	splice(x, conn, conn, up)
	p.held.release(&x.held)
	x.event = audit.EventClose
	p.record(x) // with why, when the recheck closed it
}

// hijack takes the client connection over and acknowledges the CONNECT. Bytes the client sent
// early (a ClientHello right behind the CONNECT) stay readable.
func hijack(w http.ResponseWriter) (net.Conn, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	hijacked(conn) // the tunnel opens: no longer HTTP/1
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	if brw.Reader.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: brw.Reader}, nil
	}
	return conn, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// NetConn is the connection c reads ahead of.
func (c *bufferedConn) NetConn() net.Conn { return c.Conn }

func isIP(h string) bool { return net.ParseIP(h) != nil }

// connListener hands one connection to http.Server and then blocks until Close, so Serve returns
// when the client is done. The connection is passed through unwrapped: the server must see the
// *tls.Conn to serve HTTP/2.
type connListener struct {
	mu     sync.Mutex
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
}

func newConnListener(c net.Conn) *connListener {
	return &connListener{conn: c, closed: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{} }
