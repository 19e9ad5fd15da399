package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/pool"
)

// PortRequest is the body of POST /v1/leases/{id}/ports.
type PortRequest struct {
	Port int `json:"port"`
}

// PortView is an exposed sandbox port: a URL, on a listener of its own, that carries a one-time
// capability; the first visit trades it for a cookie scoped to that listener.
type PortView struct {
	Lease string `json:"lease"`
	Port  int    `json:"port"`
	URL   string `json:"url"`
}

// ports serves each exposed sandbox port on its own loopback listener, so a page under review
// never shares an origin with the API. Safe for concurrent use.
type ports struct {
	host string // address listeners bind to (the API's host)
	pool *pool.Manager

	mu       sync.Mutex
	open     map[string][]*exposed // lease id -> its exposed ports
	sweeping bool
}

type exposed struct {
	srv    *http.Server
	secret string
	url    string
	tenant string
}

const portCookie = "airlock_port"

func (p *ports) expose(ctx context.Context, tenant, id string, port int) (PortView, error) {
	if port < 1 || port > 65535 {
		return PortView{}, fmt.Errorf("%w: port %d out of range", pool.ErrBadRequest, port)
	}
	l, err := p.pool.Held(ctx, tenant, id)
	if err != nil {
		return PortView{}, err
	}
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort(l.Sandbox.Addr.String(), strconv.Itoa(port))}
	ln, err := net.Listen("tcp", net.JoinHostPort(p.host, "0"))
	if err != nil {
		return PortView{}, err
	}
	var b [24]byte
	rand.Read(b[:])
	e := &exposed{secret: hex.EncodeToString(b[:]), tenant: tenant}
	e.url = fmt.Sprintf("http://%s/?%s=%s", ln.Addr(), portCookie, e.secret)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
		// The capability never travels on to the sandbox.
		q := pr.Out.URL.Query()
		q.Del(portCookie)
		pr.Out.URL.RawQuery = q.Encode()
		removeCookie(pr.Out, portCookie)
	}}
	e.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query().Get(portCookie); q != "" && subtle.ConstantTimeCompare([]byte(q), []byte(e.secret)) == 1 {
			http.SetCookie(w, &http.Cookie{Name: portCookie, Value: e.secret, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u := *r.URL
			v := u.Query()
			v.Del(portCookie)
			u.RawQuery = v.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		c, err := r.Cookie(portCookie)
		if err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(e.secret)) != 1 {
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
	p.mu.Lock()
	if p.open == nil {
		p.open = map[string][]*exposed{}
	}
	p.open[id] = append(p.open[id], e)
	if !p.sweeping {
		p.sweeping = true
		go p.sweep()
	}
	p.mu.Unlock()
	return PortView{Lease: id, Port: port, URL: e.url}, nil
}

// closeLease closes every port exposed for lease id.
func (p *ports) closeLease(id string) {
	p.mu.Lock()
	es := p.open[id]
	delete(p.open, id)
	p.mu.Unlock()
	for _, e := range es {
		e.srv.Close()
	}
}

// sweep closes, every 10s while any port is open, the ports whose lease has ended (released
// through another API replica, or expired).
func (p *ports) sweep() {
	t := time.NewTicker(10 * time.Second)
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

func removeCookie(r *http.Request, name string) {
	cs := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cs {
		if c.Name != name {
			r.AddCookie(c)
		}
	}
}
