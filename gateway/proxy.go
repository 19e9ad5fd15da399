package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/exfil"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

// Bindings finds the lease a sandbox address holds; *binding.Cache meets it.
type Bindings interface {
	Lookup(ctx context.Context, addr netip.Addr) (binding.Binding, error)
}

// Package binding cannot name this interface (it is imported here), so its implementations are
// guarded beside it.
var (
	_ Bindings = (*binding.Cache)(nil)
	_ Bindings = binding.Static{}
)

// Config is what a Proxy needs. Zero values are not usable unless the field says so.
type Config struct {
	Node     string
	Bindings Bindings
	CA       *ca.Authority
	Catalog  broker.Catalog
	Broker   broker.Broker
	// Audit takes every decision's record. When it is an audit.Checker (or wraps one: see
	// audit.Check), nothing passes while it says a write would fail.
	Audit audit.Sink
	// Approvals holds the requests of scopes that ask for approval; nil refuses them (nothing
	// here could answer).
	Approvals *approval.Registry
	// PrivateUpstreams pins "host:port" to one address. It is the only way a name reaches a
	// non-public address; ranges are deliberately not offered, since a range covering loopback
	// would hand sandboxes Redis, Vault and the API.
	PrivateUpstreams map[string]netip.AddrPort
	// Mirrors sends what is asked of one "host:port" to another server, such as an internal
	// mirror of a public registry: scopes are decided on the name asked, the credential
	// catalog and the transport on the mirror, which is what is dialed and recorded.
	Mirrors map[string]Mirror
	// UpstreamRoots verifies upstream TLS; nil means the system roots.
	UpstreamRoots *x509.CertPool
	// Resolver resolves upstream names; nil means net.DefaultResolver.
	Resolver Resolver
	// Dialer opens upstream connections; nil means a net.Dialer with a 10s timeout.
	Dialer ContextDialer
	// Admit decides on a task token that a client outside the pool presents in
	// Proxy-Authorization: Bearer, exactly as a lease is decided on (pool.Manager.AdmitBearer:
	// the issuer may speak for the token's tenant, deployment policy, one use of its jti). Nil
	// refuses such clients.
	Admit func(ctx context.Context, raw string) (token.Task, error)
	// Verify checks a token's signature and claims only, for Explain; nil means Explain
	// refuses every token.
	Verify func(raw string) (token.Task, error)
	// Budget is the per-lease default; a token's budget narrows it. Zero means no limit.
	Budget budget.Budget
	// Guard refuses names under wildcard scopes that look like data leaving, before the
	// gateway looks them up (see package exfil); the node shares one with its resolver. Nil
	// means one with the default limits.
	Guard  *exfil.Guard
	Logger *slog.Logger
}

// Proxy is the egress gateway's HTTP handler: CONNECT and absolute-form requests from sandboxes.
// Safe for concurrent use.
type Proxy struct {
	cfg     Config
	dial    *dialer
	log     *slog.Logger
	tunnels atomic.Int64
	tokens  *tokenIdentities
	budgets *budgets
	metrics *Metrics // nil until NewMetrics
	dyn     atomic.Pointer[dynamic]
	held    holds // what the recheck decides again: tunnels, sessions, requests in flight

	transports *transports
	scrubbers  scrubbers

	redirectWait atomic.Int64 // see redirectedWait

	srvMu sync.Mutex
	srv   *h1Server
}

// New builds a Proxy from cfg.
func New(cfg Config) *Proxy {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Guard == nil {
		cfg.Guard = exfil.New(exfil.Limits{})
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger,
		tokens:  &tokenIdentities{admit: cfg.Admit, now: time.Now, cache: map[[32]byte]binding.Binding{}},
		budgets: &budgets{},
	}
	p.dyn.Store(&dynamic{catalog: cfg.Catalog, pins: cfg.PrivateUpstreams, mirrors: cfg.Mirrors, budget: cfg.Budget})
	p.dial = &dialer{pins: func() map[string]netip.AddrPort { return p.dyn.Load().pins }, resolver: cfg.Resolver, net: cfg.Dialer,
		ttl: lookupTTL}
	transport := &http.Transport{
		DialContext:           p.dial.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	p.transports = newTransports(transport)
	return p
}

// Mirror is where requests for a name are sent instead (Config.Mirrors).
type Mirror struct {
	Scheme string // "https" or "http"
	Host   string // canonical
	Port   int
}

func (m Mirror) String() string {
	return m.Scheme + "://" + net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
}

// dynamic is the part of the configuration that Reload swaps while connections stay open.
type dynamic struct {
	catalog broker.Catalog
	pins    map[string]netip.AddrPort
	mirrors map[string]Mirror
	budget  budget.Budget
}

// Reload replaces the credential catalog, the private upstreams, the mirrors and the default
// budget. Open connections stay open; their next request is decided under the new settings.
func (p *Proxy) Reload(catalog broker.Catalog, privateUpstreams map[string]netip.AddrPort, mirrors map[string]Mirror, budget budget.Budget) {
	p.dyn.Store(&dynamic{catalog: catalog, pins: privateUpstreams, mirrors: mirrors, budget: budget})
}

// Catalog returns the credential catalog in force (the one the last Reload brought).
func (p *Proxy) Catalog() broker.Catalog { return p.dyn.Load().catalog }

// Serve answers sandboxes on l until Close. Every connection's HTTP/1 framing is checked first
// (see framingConn), then served by h1Server: net/http's parsers and writers on the
// connection's own goroutine.
func (p *Proxy) Serve(l net.Listener) error {
	p.srvMu.Lock()
	p.srv = newH1Server(p, p.log)
	srv := p.srv
	p.srvMu.Unlock()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go p.runRecheck(ctx)
	err := srv.Serve(NewFramingListener(l, func(remote net.Addr, reason string) {
		p.recordFraming(remote.String(), nil, reason)
	}))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops Serve and closes every connection.
func (p *Proxy) Close() error {
	p.transports.pool.close()
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	if p.srv == nil {
		return nil
	}
	return p.srv.Close()
}

// bufferPool lends the 32 KiB buffers that bodies are copied through, so a request does not
// allocate one.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(s []byte) { b.p.Put(&s) }

var copyBuffers = &bufferPool{p: sync.Pool{New: func() any { s := make([]byte, copyBuffer); return &s }}}

// bulkBuffers carry the writes of answers of a MiB or more (copyBulk).
var bulkBuffers = &bufferPool{p: sync.Pool{New: func() any { s := make([]byte, bulkBuffer); return &s }}}

const (
	copyBuffer = 32 << 10  // the size of copyBuffers
	bulkBuffer = 256 << 10 // the size of bulkBuffers
	bulkBody   = 1 << 20   // the size from which an answer of known length is copied by copyBulk
)

// exchange is one request's state, from identification to its audit record. It is passed from
// step to step, never carried in a context.
type exchange struct {
	start    time.Time
	method   string
	h2       bool // the sandbox spoke HTTP/2: the request goes upstream in it where it can
	json     bool // the client asked for refusals in JSON
	src      netip.Addr
	b        binding.Binding
	scheme   string
	host     string // canonical
	port     int
	path     string // the request path as matched and as sent (wire form); empty for CONNECT
	upgrade  string // the protocol the request asks to switch to, if any
	scope    scope.Scope
	entry    *broker.Entry
	secret   broker.Secret
	scrub    *scrubber // every form of the injected credential; nil when none was injected
	upstream string
	refusal  *Refusal
	status   int
	up, down int64
	bearer   string      // the task token a client outside the pool identified with
	meter    *meter      // what the sandbox sent upstream, against the lease's budget
	event    audit.Event // a tunnel's record: open or close
	dest     string      // where the sandbox connected, when the network redirected it here
	mirror   *Mirror
	note     string // what an allowed request did beyond its scope (a git push's refs), for its record
	sent     bool   // the request was handed to the transport: its credential, if any, left the gateway
	held     hold   // while the exchange is held: its request in flight, or its tunnel or session
}

// sendTo is where x's request goes: its mirror, or the destination asked.
func (x *exchange) sendTo() (scheme, host string, port int) {
	if x.mirror != nil {
		return x.mirror.Scheme, x.mirror.Host, x.mirror.Port
	}
	return x.scheme, x.host, x.port
}

// take sets what g allows x: its scope, and its mirror, which is where x's traffic goes.
func (x *exchange) take(g grant) {
	x.scope, x.mirror = g.scope, g.mirror
}

// newExchange starts the exchange of r.
func newExchange(r *http.Request) *exchange {
	x := &exchange{start: time.Now(), method: r.Method, h2: r.ProtoMajor == 2, json: strings.Contains(r.Header.Get("Accept"), "application/json"),
		meter: &meter{}}
	if r.Method != http.MethodConnect && r.URL != nil {
		x.path = r.URL.EscapedPath()
	}
	return x
}

// ServeHTTP handles one request from a sandbox.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := newExchange(r)
	defer x.meter.release()
	if err := p.identify(r, x, ""); err != nil {
		p.deny(w, x, err)
		return
	}
	if r.Method == http.MethodConnect {
		p.serveConnect(w, r, x)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		p.deny(w, x, refuse(http.StatusBadRequest, rule.BadRequest,
			"a proxy request must use the absolute form http://host/path; use CONNECT for https", ""))
		return
	}
	if err := p.target(x, "http", r.URL.Host, 80); err != nil {
		p.deny(w, x, err)
		return
	}
	p.forward(w, r, x)
}

// target sets the exchange's destination from a host[:port] string.
func (p *Proxy) target(x *exchange, scheme, hostport string, defPort int) error {
	host, port, err := splitHostPort(hostport, defPort)
	if err != nil {
		return refuse(http.StatusBadRequest, rule.BadRequest, err.Error(), "")
	}
	x.scheme, x.host, x.port = scheme, host, port
	return nil
}

func splitHostPort(hostport string, defPort int) (string, int, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	port := defPort
	if err != nil {
		host = hostport
	} else if port, err = strconv.Atoi(portStr); err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", hostport)
	}
	host, err = scope.CanonicalHost(strings.Trim(host, "[]"))
	if err != nil {
		return "", 0, fmt.Errorf("bad host %q: %v", hostport, err)
	}
	return host, port, nil
}
