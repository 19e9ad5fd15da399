package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/pool"
)

// ports serves each exposed sandbox port on its own loopback listener, so a page under review
// never shares an origin with the API. Safe for concurrent use.
type ports struct {
	host     string // address listeners bind to (the API's host)
	pool     *pool.Manager
	perLease int           // most ports one lease may expose at once
	every    time.Duration // how often leases that ended elsewhere are swept

	mu       sync.Mutex
	open     map[string][]*exposed // lease id -> its exposed ports
	sweeping bool
}

type exposed struct {
	srv    *http.Server
	port   int
	secret string
	url    string
	tenant string

	// conns are the proxy's connections to the sandbox's port. Closing the port closes them
	// too: one the sandbox's service upgraded (a WebSocket) was handed off by srv, which does
	// not close it, and a released lease's sandbox runs on until its end is finished.
	connMu sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// dial connects to the sandbox's port for the proxy, keeping the connection in e.conns.
func (e *exposed) dial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		e.connMu.Lock()
		defer e.connMu.Unlock()
		if e.closed {
			c.Close()
			return nil, errors.New("airlock: the port is closed")
		}
		if e.conns == nil {
			e.conns = map[net.Conn]struct{}{}
		}
		tc := &portConn{Conn: c, e: e}
		e.conns[tc] = struct{}{}
		return tc, nil
	}
}

// close closes e's listener, its connections from clients and those to the sandbox.
func (e *exposed) close() {
	e.srv.Close()
	e.connMu.Lock()
	e.closed = true
	cs := e.conns
	e.conns = nil
	e.connMu.Unlock()
	for c := range cs {
		c.Close()
	}
}

// portConn is a connection to a sandbox's port that leaves its exposed port's set when closed.
type portConn struct {
	net.Conn
	e    *exposed
	once sync.Once
}

func (c *portConn) Close() error {
	c.once.Do(func() {
		c.e.connMu.Lock()
		delete(c.e.conns, c)
		c.e.connMu.Unlock()
	})
	return c.Conn.Close()
}

// DefaultMaxPortsPerLease is how many ports one lease may expose when the configuration says
// nothing: each is a listener and a proxy on the node, so a lease must not be able to open them
// without bound.
const DefaultMaxPortsPerLease = 8

// errTooManyPorts refuses an exposure past the lease's bound.
var errTooManyPorts = errors.New("too many exposed ports")

// portCookie is the prefix of the capability cookie's name; each exposed port's cookie is named
// for its listener, and no sandbox may set a cookie under the prefix.
const portCookie = "airlock_port"

// listen opens the exposed port's listener. A browser scopes cookies by host, not port, so on a
// loopback API each exposed port gets a loopback address of its own (127.x.y.z; Linux answers on
// all of 127.0.0.0/8): its capability cookie is then never sent to, readable by or settable from
// another exposed port. Elsewhere every port shares the host, and the cookie is bound by name
// to its listener instead, while Set-Cookie headers under the prefix are stripped from what
// sandboxes send.
func (p *ports) listen() (net.Listener, error) {
	if a, err := netip.ParseAddr(p.host); err == nil && a.Is4() && a.IsLoopback() {
		for range 8 {
			var b [3]byte
			rand.Read(b[:])
			b[2] = 2 + b[2]%250 // not .0, .1, .255
			ln, err := net.Listen("tcp", netip.AddrFrom4([4]byte{127, b[0], b[1], b[2]}).String()+":0")
			if err == nil {
				return ln, nil
			}
		}
	}
	return net.Listen("tcp", net.JoinHostPort(p.host, "0"))
}

func (p *ports) expose(ctx context.Context, tenant, id string, port int) (PortView, error) {
	if port < 1 || port > 65535 {
		return PortView{}, fmt.Errorf("%w: port %d out of range", pool.ErrBadRequest, port)
	}
	l, err := p.pool.Held(ctx, tenant, id)
	if err != nil {
		return PortView{}, err
	}
	if t, ok := p.pool.Template(l.Template); ok && len(t.Ports) > 0 && !slices.Contains(t.Ports, port) {
		return PortView{}, fmt.Errorf("%w: template %s exposes only ports %v (its ports, or its devcontainer's forwardPorts)", pool.ErrBadRequest, t.Name, t.Ports)
	}
	// The bound holds under concurrent calls: the check, the listener and the record go together.
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.open[id] {
		if e.port == port {
			return PortView{Lease: id, Port: port, URL: e.url}, nil // exposed already: the same URL
		}
	}
	if n := len(p.open[id]); n >= p.perLease {
		return PortView{}, fmt.Errorf("%w: lease %s already exposes %d ports, the most one lease may (api.max_ports_per_lease)", errTooManyPorts, id, n)
	}
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort(l.Sandbox.Addr.String(), strconv.Itoa(port))}
	ln, err := p.listen()
	if err != nil {
		return PortView{}, err
	}
	var b [24]byte
	rand.Read(b[:])
	e := &exposed{port: port, secret: hex.EncodeToString(b[:]), tenant: tenant}
	cookie := fmt.Sprintf("%s_%d", portCookie, ln.Addr().(*net.TCPAddr).Port)
	e.url = fmt.Sprintf("http://%s/?%s=%s", ln.Addr(), portCookie, e.secret)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			// The capability never travels on to the sandbox: neither this port's cookie nor
			// any other port's that the browser sends along.
			q := pr.Out.URL.Query()
			q.Del(portCookie)
			pr.Out.URL.RawQuery = q.Encode()
			removeCookies(pr.Out, portCookie)
		},
		// Nor may the sandbox set, overwrite or shadow one.
		ModifyResponse: func(resp *http.Response) error {
			stripSetCookies(resp.Header, portCookie)
			return nil
		},
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = e.dial(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
	rp.Transport = tr
	e.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query().Get(portCookie); q != "" && subtle.ConstantTimeCompare([]byte(q), []byte(e.secret)) == 1 {
			http.SetCookie(w, &http.Cookie{Name: cookie, Value: e.secret, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u := *r.URL
			v := u.Query()
			v.Del(portCookie)
			u.RawQuery = v.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if !hasCookie(r, cookie, e.secret) {
			http.Error(w, "airlock: this port needs the URL airlock port printed", http.StatusUnauthorized)
			return
		}
		// The lease must still be live and still hold this sandbox.
		cur, err := p.pool.Get(r.Context(), tenant, id)
		if err != nil || cur.Sandbox.ID != l.Sandbox.ID || !time.Now().Before(cur.Expires) {
			http.Error(w, "airlock: the lease behind this port has ended", http.StatusGone)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go e.srv.Serve(ln)
	if p.open == nil {
		p.open = map[string][]*exposed{}
	}
	p.open[id] = append(p.open[id], e)
	if !p.sweeping {
		p.sweeping = true
		go p.sweep()
	}
	return PortView{Lease: id, Port: port, URL: e.url}, nil
}

// hasCookie reports whether any cookie named name in r holds secret: a browser may send several
// of one name (other paths), and one of them being wrong must not lock the owner out.
func hasCookie(r *http.Request, name, secret string) bool {
	for _, c := range r.CookiesNamed(name) {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(secret)) == 1 {
			return true
		}
	}
	return false
}

// closeLease closes every port exposed for lease id.
func (p *ports) closeLease(id string) {
	p.mu.Lock()
	es := p.open[id]
	delete(p.open, id)
	p.mu.Unlock()
	for _, e := range es {
		e.close()
	}
}

// sweep closes, every p.every while any port is open, the ports whose lease has ended (released
// through another API replica, or expired); until then each request through them is refused.
func (p *ports) sweep() {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for range t.C {
		p.mu.Lock()
		leases := make(map[string]string, len(p.open))
		for id, es := range p.open {
			leases[id] = es[0].tenant
		}
		p.mu.Unlock()
		if len(leases) == 0 {
			p.mu.Lock()
			still := len(p.open) > 0
			p.sweeping = still
			p.mu.Unlock()
			if !still {
				return
			}
			continue
		}
		for id, tenant := range leases {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			l, err := p.pool.Get(ctx, tenant, id)
			cancel()
			if err != nil || !time.Now().Before(l.Expires) {
				p.closeLease(id)
			}
		}
	}
}

// removeCookies drops from r every cookie whose name starts with prefix (any case).
func removeCookies(r *http.Request, prefix string) {
	cs := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cs {
		if !hasPrefixFold(c.Name, prefix) {
			r.AddCookie(c)
		}
	}
}

// stripSetCookies drops every Set-Cookie in h that names a cookie starting with prefix (any
// case), or that does not parse, so a browser cannot read it some other way.
func stripSetCookies(h http.Header, prefix string) {
	vs := h.Values("Set-Cookie")
	h.Del("Set-Cookie")
	for _, v := range vs {
		c, err := http.ParseSetCookie(v)
		if err != nil || hasPrefixFold(c.Name, prefix) || hasPrefixFold(strings.TrimSpace(v), prefix) {
			continue
		}
		h.Add("Set-Cookie", v)
	}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
