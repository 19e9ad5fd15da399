package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

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

// Config is what a Proxy needs. Zero values are not usable unless the field says so.
type Config struct {
	Node     string
	Bindings Bindings
	CA       *ca.Authority
	Catalog  broker.Catalog
	Broker   broker.Broker
	Audit    audit.Sink
	// PrivateUpstreams pins "host:port" to one address. It is the only way a name reaches a
	// non-public address; ranges are deliberately not offered, since a range covering loopback
	// would hand sandboxes Redis, Vault and the API.
	PrivateUpstreams map[string]netip.AddrPort
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
	rp      *httputil.ReverseProxy
	log     *slog.Logger
	tunnels atomic.Int64
	tokens  *tokenIdentities
	budgets *budgets
	metrics *Metrics // nil until NewMetrics
	dyn     atomic.Pointer[dynamic]
	open    conns

	transports *transports
	scrubbers  scrubbers

	srvMu sync.Mutex
	srv   *http.Server
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
	p.dyn.Store(&dynamic{catalog: cfg.Catalog, pins: cfg.PrivateUpstreams, budget: cfg.Budget})
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
	p.transports = &transports{base: transport}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      p.transports,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.proxyError,
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
		// Zero: a response of known length goes out in one write at the end; ReverseProxy
		// still flushes every write of streamed (unknown-length, event-stream) responses.
		FlushInterval: 0,
		BufferPool:    copyBuffers,
	}
	return p
}

// dynamic is the part of the configuration that Reload swaps while connections stay open.
type dynamic struct {
	catalog broker.Catalog
	pins    map[string]netip.AddrPort
	budget  budget.Budget
}

// Reload replaces the credential catalog, the private upstreams and the default budget. Open
// connections stay open; their next request is decided under the new settings.
func (p *Proxy) Reload(catalog broker.Catalog, privateUpstreams map[string]netip.AddrPort, budget budget.Budget) {
	p.dyn.Store(&dynamic{catalog: catalog, pins: privateUpstreams, budget: budget})
}

// Catalog returns the credential catalog in force (the one the last Reload brought).
func (p *Proxy) Catalog() broker.Catalog { return p.dyn.Load().catalog }

// Serve answers sandboxes on l until Close. Every connection's HTTP/1 framing is checked first
// (see framingConn).
func (p *Proxy) Serve(l net.Listener) error {
	p.srvMu.Lock()
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	srv := p.srv
	p.srvMu.Unlock()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go p.runRecheck(ctx)
	err := srv.Serve(NewFramingListener(l, func(remote net.Addr, reason string) {
		x := &exchange{start: time.Now()}
		req := &http.Request{RemoteAddr: remote.String(), URL: &url.URL{}}
		p.recordFraming(req, x, reason)
	}))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops Serve and closes every connection.
func (p *Proxy) Close() error {
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	if p.srv == nil {
		return nil
	}
	return p.srv.Close()
}

// recordFraming records a request refused for its framing, with the lease when one is known.
func (p *Proxy) recordFraming(r *http.Request, x *exchange, reason string) {
	if x.b.Lease == "" {
		p.identify(r.WithContext(context.Background()), x, "")
	}
	x.refusal = refuse(http.StatusBadRequest, rule.BadRequest, reason, "")
	x.status = http.StatusBadRequest
	rec := &http.Request{Method: "", URL: &url.URL{}, RemoteAddr: r.RemoteAddr}
	p.record(rec, x)
}

// bufferPool lends the 32 KiB buffers that bodies are copied through, so a request does not
// allocate one.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(s []byte) { b.p.Put(&s) }

var copyBuffers = &bufferPool{p: sync.Pool{New: func() any { s := make([]byte, 32<<10); return &s }}}

// exchange is one request's state, from identification to its audit record.
type exchange struct {
	start    time.Time
	src      netip.Addr
	b        binding.Binding
	scheme   string
	host     string // canonical
	port     int
	path     string // the request path as matched and as sent (wire form); empty for CONNECT
	scope    scope.Scope
	entry    *broker.Entry
	secret   broker.Secret
	scrub    *scrubber // every form of the injected credential; nil when none was injected
	upstream string
	refusal  *Refusal
	status   int
	up, down int64
	bearer   string // the task token a client outside the pool identified with
	meter    *meter // what the sandbox sent upstream, against the lease's budget
	event    string // a tunnel's record: "open" or "close"
	// sendErr is set by rewrite when the prepared request must not be sent (its credential
	// could not be applied, or it is not the request decided on); RoundTrip returns it.
	sendErr *Refusal
}

type exchangeKey struct{}

// ServeHTTP handles one request from a sandbox.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{start: time.Now()}
	if err := p.identify(r, x, ""); err != nil {
		p.deny(w, r, x, err)
		return
	}
	if r.Method == http.MethodConnect {
		p.serveConnect(w, r, x)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		p.deny(w, r, x, refuse(http.StatusBadRequest, rule.BadRequest,
			"a proxy request must use the absolute form http://host/path; use CONNECT for https", ""))
		return
	}
	if err := p.target(x, "http", r.URL.Host, 80); err != nil {
		p.deny(w, r, x, err)
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

// forward checks one request against the scopes, injects its credential and sends it upstream.
// The refusals that need no I/O come first; the broker is asked only for a request that passed
// them all.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, x *exchange) {
	if err := p.admit(r, x); err != nil {
		p.deny(w, r, x, err)
		return
	}
	// Where it goes, before anything is borrowed for it: a name that resolves only to private
	// addresses never costs a credential. The transport dials the address vetted here.
	if _, err := p.dial.vet(r.Context(), x.host, x.port, p.recordLookup(r, x)); err != nil {
		p.deny(w, r, x, err)
		return
	}
	if x.entry != nil {
		var err error
		if x.secret, err = p.cfg.Broker.Get(r.Context(), broker.Lease{ID: x.b.Lease, Expires: x.b.Expires}, x.entry); err != nil {
			p.deny(w, r, x, err)
			return
		}
	}
	ctx := context.WithValue(r.Context(), exchangeKey{}, x)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) { x.upstream = ci.Conn.RemoteAddr().String() },
	})
	cw := &countingWriter{ResponseWriter: w, x: x}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &meteredBody{ReadCloser: r.Body, m: x.meter}
	}
	p.rp.ServeHTTP(cw, r.WithContext(ctx))
	if x.scrub != nil {
		// Trailers are in the header map now and go out once the handler returns.
		x.scrub.scrubHeaders(w.Header())
	}
	x.status, x.up, x.down = cw.status, x.meter.n.Load(), cw.n
	p.record(r, x)
}

// admit applies every refusal that needs no broker call: the path's form, the scopes and the
// catalog, a protocol switch that could not be scrubbed, the trail's health, the lease's
// budget and the signing cap of the body.
func (p *Proxy) admit(r *http.Request, x *exchange) error {
	// The path is decided on exactly as it will be sent (rewrite checks that it is).
	x.path = r.URL.EscapedPath()
	if err := scope.CheckPath(x.path); err != nil {
		return pathRefusal(err)
	}
	if err := p.decide(x, r.Method, x.path); err != nil {
		return err
	}
	if err := p.guardName(x); err != nil {
		return err
	}
	if x.entry != nil && upgradeType(r.Header) != "" {
		return refuse(http.StatusForbidden, rule.Unscrubbable,
			fmt.Sprintf("scope %s injects credential %q, and a %s stream could not be checked for it on the way back",
				x.scope, x.entry.Name, upgradeType(r.Header)),
			"a scope without a credential for this upgrade, or a request that does not switch protocols")
	}
	if c, ok := p.cfg.Audit.(audit.Checker); ok {
		if err := c.Err(); err != nil {
			return err
		}
	}
	if err := p.startRequest(x, r.ContentLength); err != nil {
		return err
	}
	return boundSignedBody(r, x)
}

// guardName refuses, before the gateway looks it up, a name under a wildcard scope that looks
// like data leaving: the same guard, and the same counts, as the resolver's.
func (p *Proxy) guardName(x *exchange) error {
	apex, ok := strings.CutPrefix(x.scope.Host, "*.")
	if !ok {
		return nil
	}
	if reason := p.cfg.Guard.Check(x.b.Lease, apex, x.host, time.Now()); reason != "" {
		return &Refusal{Status: http.StatusForbidden, Rule: rule.Tunnel, Reason: reason, Flagged: true,
			Hint: "names under a wildcard scope must not carry data; name the host in a scope of its own"}
	}
	return nil
}

// recordLookup records each name lookup the gateway makes for x, as the resolver records the
// sandbox's own: a lookup that cannot be recorded refuses the request.
func (p *Proxy) recordLookup(r *http.Request, x *exchange) func(lookup) error {
	return func(l lookup) error {
		rec := audit.Record{Time: time.Now().Add(-l.took), Kind: audit.KindDNS, Event: "gateway-lookup", Node: p.cfg.Node,
			Tenant: x.b.Tenant, Lease: x.b.Lease, Task: x.b.Task, Sandbox: x.b.Sandbox, Source: x.src.String(),
			QName: l.host, QType: "A+AAAA", Answers: len(l.addrs), Decision: audit.Allow, Rule: rule.Scope,
			Reason:     "looked up by the gateway for " + x.scope.String(),
			DurationMS: float64(l.took.Microseconds()) / 1000}
		if l.err != nil {
			rec.Decision, rec.Rule, rec.Reason = audit.Deny, rule.UpstreamFailed, l.err.Error()
		} else if !slices.ContainsFunc(l.addrs, func(a netip.Addr) bool { return p.dial.allowed(a.Unmap()) }) {
			rec.Decision, rec.Rule, rec.Reason = audit.Deny, rule.PrivateAddress, fmt.Sprintf("resolved only to non-public addresses %v", l.addrs)
		}
		return p.cfg.Audit.Write(r.Context(), rec)
	}
}

// upgradeType is the protocol a request asks to switch to, as ReverseProxy reads it; "" when
// it asks for none.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// pathRefusal is the refusal of a request path that scope.CheckPath refused.
func pathRefusal(err error) *Refusal {
	return refuse(http.StatusBadRequest, rule.AmbiguousPath, err.Error(),
		"send the path in plain form: no dot segments, //, backslashes or percent-encoded / . \\")
}

// boundSignedBody enforces the signing cap of a SigV4 credential that hashes the payload: a body
// over it is refused before anything is sent, and a body under it is read here so that signing
// hashes memory, not the network.
func boundSignedBody(r *http.Request, x *exchange) error {
	if x.entry == nil || x.entry.Inject.Kind != broker.InjectSigV4 || x.entry.Inject.UnsignedPayload {
		return nil
	}
	limit := x.entry.Inject.MaxBody
	tooLarge := refuse(http.StatusRequestEntityTooLarge, rule.BodyTooLarge,
		fmt.Sprintf("credential %q signs the request body, and bodies over %d bytes are not signed", x.entry.Name, limit),
		"send less, or have the operator sign with UNSIGNED-PAYLOAD where the service accepts it")
	if r.ContentLength > limit {
		return tooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return refuse(http.StatusBadRequest, rule.BadRequest, "reading the request body: "+err.Error(), "")
	}
	if int64(len(b)) > limit {
		return tooLarge
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	return nil
}

// decide applies the task's scopes and the credential catalog to one request, setting the
// matching scope and the credential entry to inject. It does no I/O: forward and Explain share it.
func (p *Proxy) decide(x *exchange, method, path string) error {
	s, ok := x.b.Scopes.Match(scope.Request{Host: x.host, Port: x.port, Method: method, Path: path})
	if !ok {
		return p.scopeMiss(x, method, path)
	}
	x.scope = s
	if s.Credential != "" {
		e, err := p.dyn.Load().catalog.Authorize(s.Credential, x.host, x.b.Tenant)
		if err != nil {
			return err
		}
		if err := e.CheckTransport(x.scheme, x.port); err != nil {
			return err
		}
		x.entry = e
	}
	return nil
}

func (p *Proxy) scopeMiss(x *exchange, method, path string) *Refusal {
	dest := net.JoinHostPort(x.host, strconv.Itoa(x.port))
	if _, err := netip.ParseAddr(x.host); err == nil {
		return refuse(http.StatusForbidden, rule.ScopeMiss,
			fmt.Sprintf("task %s has no scope for the IP address %s", x.b.Task, dest),
			"IP-literal destinations need a cidr scope naming a public range")
	}
	what := dest
	if method != "" {
		what = fmt.Sprintf("%s %s%s", method, dest, path)
	}
	return refuse(http.StatusForbidden, rule.ScopeMiss,
		fmt.Sprintf("task %s has no scope allowing %s", x.b.Task, what),
		fmt.Sprintf("a task token with a scope such as {\"host\": %q, \"ports\": [%d]}", x.host, x.port))
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	x := pr.In.Context().Value(exchangeKey{}).(*exchange)
	out := pr.Out
	out.URL.Scheme = x.scheme
	out.URL.Host = net.JoinHostPort(x.host, strconv.Itoa(x.port))
	out.Host = x.host
	if !(x.scheme == "https" && x.port == 443) && !(x.scheme == "http" && x.port == 80) {
		out.Host = out.URL.Host
	}
	out.Header.Del("Proxy-Authorization")
	out.Header.Del("Proxy-Connection")
	if got := out.URL.EscapedPath(); got != x.path {
		// Never reached while the path passes through untouched; if it ever is, nothing is sent.
		x.sendErr = refuse(http.StatusInternalServerError, rule.AmbiguousPath,
			fmt.Sprintf("the path to send (%q) is not the path decided on (%q)", got, x.path), "")
		return
	}
	if x.entry != nil {
		// Scrubbing needs plain bytes back; set before signing, which covers the headers.
		out.Header.Set("Accept-Encoding", "identity")
		injected, err := x.entry.Apply(out, x.secret)
		if err != nil {
			// Refused in RoundTrip: nothing borrowed is sent half-applied.
			x.sendErr = refuse(http.StatusBadGateway, rule.CredentialDown, err.Error(), "")
			return
		}
		x.scrub = p.scrubbers.of(x.secret.Values(), injected)
	}
}

// modifyResponse scrubs every form of an injected credential from what the upstream sends back:
// headers (1xx ones in countingWriter, trailers in forward) and the body, whatever its type. A
// body in a content coding the gateway cannot undo, and a switch to another protocol, cannot be
// scrubbed, so they never carry a response to a request that had a credential.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	x := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	if x.scrub == nil {
		return nil
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return refuse(http.StatusBadGateway, rule.Unscrubbable,
			fmt.Sprintf("the upstream switched protocols on a request that carried credential %q; an upgraded stream cannot be checked for it", x.entry.Name), "")
	}
	x.scrub.scrubHeaders(resp.Header)
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	if ce := resp.Header.Values("Content-Encoding"); len(ce) > 0 {
		body, coding, ok := decoded(resp.Body, strings.Join(ce, ","))
		if !ok {
			resp.Body.Close()
			return refuse(http.StatusBadGateway, rule.Unscrubbable,
				fmt.Sprintf("upstream sent a %s-encoded body where credential %q was injected; it cannot be checked for the credential", coding, x.entry.Name),
				"the upstream should answer with identity encoding, which the gateway asks for")
		}
		// Sent on decoded: the sandbox gets the scrubbed plain bytes.
		resp.Body = body
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	if resp.ContentLength >= 0 && resp.ContentLength <= smallBody {
		// A small body of known length is scrubbed whole and keeps an exact Content-Length,
		// so it still goes out in one write (no chunking, no flush per write).
		b, err := io.ReadAll(io.LimitReader(resp.Body, smallBody+1))
		resp.Body.Close()
		if err != nil {
			return err
		}
		b, _ = x.scrub.scrub(b)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	resp.Body = x.scrub.reader(resp.Body, resp.Trailer)
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return nil
}

// smallBody is the largest response body scrubbed in one piece; larger ones stream through the
// scrubbing reader.
const smallBody = 16 << 10

func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	x := r.Context().Value(exchangeKey{}).(*exchange)
	ref := refusalFor(err)
	if over := x.meter.over.Load(); over != nil {
		ref = over
	}
	if ref.Rule == rule.UpstreamFailed {
		ref.Reason = fmt.Sprintf("upstream %s:%d failed: %v", x.host, x.port, err)
	}
	ref.Reason = x.redact(ref.Reason)
	x.refusal = ref
	ref.write(w, r)
}

// deny refuses r and records it.
func (p *Proxy) deny(w http.ResponseWriter, r *http.Request, x *exchange, err error) {
	ref := refusalFor(err)
	ref.Reason = x.redact(ref.Reason)
	x.refusal, x.status = ref, ref.Status
	ref.write(w, r)
	p.record(r, x)
}

// redact is the one redaction step for everything the exchange says about itself (refusals sent
// to the sandbox, audit reasons): every form of a credential it carried is replaced.
func (x *exchange) redact(text string) string {
	switch {
	case x.scrub != nil:
		return x.scrub.scrubString(text)
	case x.secret != nil:
		return broker.Redact(text, x.secret.Values()...)
	}
	return text
}

// record writes the exchange's audit record; an error means the trail did not take it.
func (p *Proxy) record(r *http.Request, x *exchange) error {
	rec := audit.Record{
		Time: x.start, Kind: audit.KindHTTP, Node: p.cfg.Node,
		Tenant: x.b.Tenant, Lease: x.b.Lease, Task: x.b.Task, Sandbox: x.b.Sandbox, Source: x.src.String(),
		Method: r.Method, Host: x.host, Port: x.port, Path: x.path,
		Status: x.status, BytesUp: x.up, BytesDown: x.down, Upstream: x.upstream, Event: x.event,
		DurationMS: float64(time.Since(x.start).Microseconds()) / 1000,
	}
	if rec.Path == "" && r.Method != http.MethodConnect && r.URL != nil {
		rec.Path = r.URL.EscapedPath() // refused before forward read it
	}
	if x.entry != nil {
		rec.Credential = x.entry.Name
	}
	if x.refusal != nil {
		rec.Decision, rec.Rule, rec.Reason, rec.Flagged = audit.Deny, x.refusal.Rule, x.refusal.Reason, x.refusal.Flagged
	} else {
		rec.Decision, rec.Rule, rec.Reason = audit.Allow, rule.Scope, "scope "+x.scope.String()
	}
	rec.Reason = x.redact(rec.Reason)
	if x.event != "close" { // a tunnel's decision is counted once, when it opens
		p.metrics.observe(&rec, time.Since(x.start))
	}
	err := p.cfg.Audit.Write(r.Context(), rec)
	if err != nil {
		p.log.Error("audit write failed", "err", err, "lease", x.b.Lease)
	}
	return err
}

// countingWriter counts what goes back to the sandbox and scrubs informational (1xx) headers,
// which ReverseProxy passes on as they arrive.
type countingWriter struct {
	http.ResponseWriter
	x      *exchange
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(code int) {
	if code < 200 && c.x != nil && c.x.scrub != nil {
		c.x.scrub.scrubHeaders(c.ResponseWriter.Header())
	}
	if c.status == 0 && code >= 200 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Hijack is how ReverseProxy takes the connection over once the upstream answered 101: the
// framing check ends there, and no sooner.
func (c *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	hijacked(conn)
	// What the sandbox sends on the upgraded stream counts against its budget too.
	return &meteredConn{Conn: conn, m: c.x.meter}, brw, nil
}
