package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// ServeTransparent answers, on l, the connections the sandbox network redirects here: TCP to
// ports 80 and 443 of any address, from clients that ignore the proxy variables. Each is decided
// exactly as a proxied one: the sandbox is known by its address, the destination is the TLS
// server name or the Host header (never the address it dialed, which only goes in the record),
// the port is the one it dialed, and scopes, injection, scrubbing, budgets and the audit trail
// apply unchanged. originalDst reports where a connection was headed before the redirect.
func (p *Proxy) ServeTransparent(l net.Listener, originalDst func(net.Conn) (netip.AddrPort, error)) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			dst, err := originalDst(c)
			if err != nil {
				p.log.Error("redirected connection without its original destination", "remote", c.RemoteAddr(), "err", err)
				c.Close()
				return
			}
			p.serveRedirected(c, dst)
		}()
	}
}

// redirectedReadTimeout bounds how long a redirected connection may take to say what it is
// (Proxy.redirectWait, when set, replaces it: the tests shorten it).
const redirectedReadTimeout = 10 * time.Second

func (p *Proxy) redirectedWait() time.Duration {
	if d := time.Duration(p.redirectWait.Load()); d > 0 {
		return d
	}
	return redirectedReadTimeout
}

// serveRedirected decides one redirected connection: TLS (its first byte is a handshake record)
// is intercepted, or tunnelled under a tunnel scope, towards its server name; anything else is
// read as HTTP/1 towards its Host.
func (p *Proxy) serveRedirected(c net.Conn, dst netip.AddrPort) {
	x := &exchange{start: time.Now(), meter: &meter{}, dest: dst.String(), port: int(dst.Port())}
	defer x.meter.release()
	// Unidentified, it is still served: each request inside is refused on its own, readably.
	if err := p.identifyAt(context.Background(), c.RemoteAddr().String(), "", x); err != nil {
		x.src = addrOf(c.RemoteAddr().String())
	}
	wait := p.redirectedWait()
	c.SetReadDeadline(time.Now().Add(wait))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		p.refuseRedirected(c, x, refuse(http.StatusBadRequest, rule.BadRequest,
			fmt.Sprintf("a connection to %s sent nothing readable within %s", dst, wait), ""))
		return
	}
	if first[0] == 0x16 { // a TLS handshake record
		p.serveRedirectedTLS(&bufferedConn{Conn: c, r: br}, x)
		return
	}
	c.SetReadDeadline(time.Time{})
	p.serveRedirectedHTTP(&bufferedConn{Conn: c, r: br}, x)
}

// refuseRedirected records a refusal of a connection that cannot be answered in HTTP (nothing,
// or no usable TLS, came from it, or a tunnel could not open) and closes it.
func (p *Proxy) refuseRedirected(c net.Conn, x *exchange, err error) {
	x.refusal = refusalFor(err)
	x.status = x.refusal.Status
	p.record(x)
	c.Close()
}

// serveRedirectedTLS reads the ClientHello for the server name, which names the destination,
// then tunnels under a tunnel scope or intercepts, as CONNECT would to that name.
func (p *Proxy) serveRedirectedTLS(c net.Conn, x *exchange) {
	sni, replay, err := peekServerName(c)
	if err != nil {
		p.refuseRedirected(c, x, refuse(http.StatusBadRequest, rule.BadRequest,
			fmt.Sprintf("a TLS connection to %s: %v", x.dest, err), ""))
		return
	}
	c.SetReadDeadline(time.Time{})
	if sni == "" {
		p.refuseRedirected(replay, x, refuse(http.StatusForbidden, rule.HostMismatch,
			fmt.Sprintf("a TLS connection to %s names no server (SNI), so the gateway cannot tell where it goes", x.dest),
			"connect by name, or through the proxy (HTTPS_PROXY)"))
		return
	}
	host, err := scope.CanonicalHost(sni)
	if err != nil {
		p.refuseRedirected(replay, x, refuse(http.StatusBadRequest, rule.BadRequest, fmt.Sprintf("TLS server name %q: %v", sni, err), ""))
		return
	}
	x.scheme, x.host, x.method = "https", host, http.MethodConnect
	// Decided as a CONNECT to the name would be, except that a destination no scope covers is
	// still intercepted: its refusals are written in HTTP, request by request.
	g, err := p.dyn.Load().allow(x.b, x.host, x.port, "", "")
	granted := err == nil
	if granted {
		x.take(g)
	}
	if granted && g.scope.Tunnel {
		up, err := p.openTunnel(context.Background(), x, nil)
		if err != nil {
			p.refuseRedirected(replay, x, err)
			return
		}
		p.runTunnel(x, replay, up)
		return
	}
	// The server name stands for the CONNECT a proxied client would have sent, and costs what
	// that would (an unidentified sandbox is refused request by request, below).
	if x.b.Lease != "" {
		authority := net.JoinHostPort(sni, strconv.Itoa(x.port))
		if err := p.reserveSession(x, headSize(&http.Request{Method: http.MethodConnect, RequestURI: authority, Host: authority})); err != nil {
			p.refuseRedirected(replay, x, err)
			return
		}
	}
	// Every request inside is decided on its own, refusals included, and answered in HTTP.
	p.intercept(context.Background(), replay, replay.RemoteAddr().String(), x, granted)
}

// serveRedirectedHTTP serves HTTP/1 requests on c, each sent to the host its Host header names
// on the port the connection was made to.
func (p *Proxy) serveRedirectedHTTP(c net.Conn, x *exchange) {
	remote := c.RemoteAddr().String()
	fc := newFramingConn(c, func(reason string) { p.recordFraming(remote, x, reason) })
	newH1Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serveRedirectedRequest(w, r, x.port, x.dest)
	}), p.log).ServeConn(fc)
}

// serveRedirectedRequest is ServeHTTP for a request that came without the proxy: origin-form,
// its destination in Host.
func (p *Proxy) serveRedirectedRequest(w http.ResponseWriter, r *http.Request, port int, dest string) {
	x := newExchange(r)
	defer x.meter.release()
	x.dest = dest
	if err := p.identifyAt(r.Context(), r.RemoteAddr, "", x); err != nil {
		p.deny(w, x, err)
		return
	}
	if r.Method == http.MethodConnect || r.URL.IsAbs() {
		p.deny(w, x, refuse(http.StatusBadRequest, rule.BadRequest,
			"a request redirected to the gateway must be an origin-form request; proxy requests go to HTTP_PROXY", ""))
		return
	}
	if err := p.target(x, "http", r.Host, port); err != nil {
		p.deny(w, x, err)
		return
	}
	if x.port != port {
		p.deny(w, x, refuse(http.StatusForbidden, rule.HostMismatch,
			fmt.Sprintf("Host header %q names port %d, the connection was made to %s", r.Host, x.port, dest), ""))
		return
	}
	if x.host == "" {
		p.deny(w, x, refuse(http.StatusBadRequest, rule.BadRequest, "a redirected request needs a Host header", ""))
		return
	}
	r.URL.Scheme, r.URL.Host = "http", net.JoinHostPort(x.host, strconv.Itoa(port))
	p.forward(w, r, x)
}

// errHelloRead stops the handshake peekServerName runs once the ClientHello has been read.
var errHelloRead = errors.New("client hello read")

// peekServerName reads c's TLS ClientHello and returns the server name it asks for, and a
// connection that gives the same bytes again from the start, for the real handshake or a tunnel.
func peekServerName(c net.Conn) (string, net.Conn, error) {
	var seen bytes.Buffer
	var name string
	var got bool
	err := tls.Server(readOnly{r: io.TeeReader(c, &seen)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, got = h.ServerName, true
			return nil, errHelloRead
		},
	}).Handshake()
	if !got {
		return "", nil, fmt.Errorf("no readable TLS ClientHello: %v", err)
	}
	return name, &bufferedConn{Conn: c, r: bufio.NewReader(io.MultiReader(&seen, c))}, nil
}

// readOnly is a connection that can only be read: the handshake above must write nothing.
type readOnly struct {
	r io.Reader
	net.Conn
}

func (c readOnly) Read(b []byte) (int, error)     { return c.r.Read(b) }
func (readOnly) Write(b []byte) (int, error)      { return len(b), nil }
func (readOnly) Close() error                     { return nil }
func (readOnly) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnly) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnly) SetDeadline(time.Time) error      { return nil }
func (readOnly) SetReadDeadline(time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(time.Time) error { return nil }
