package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// fakeBindings serves one binding for 127.0.0.1.
type fakeBindings struct {
	lookup func(ctx context.Context, addr netip.Addr) (binding.Binding, error)
}

func (f *fakeBindings) Lookup(ctx context.Context, addr netip.Addr) (binding.Binding, error) {
	return f.lookup(ctx, addr)
}

var _ Bindings = (*fakeBindings)(nil)

// fakeBroker returns fixed secrets, or an error.
type fakeBroker struct {
	get func(ctx context.Context, lease string, e *broker.Entry) (broker.Secret, error)
}

func (f *fakeBroker) Get(ctx context.Context, lease broker.Lease, e *broker.Entry) (broker.Secret, error) {
	return f.get(ctx, lease.ID, e)
}

func (f *fakeBroker) Release(context.Context, string) error { return nil }

// memSink keeps records in memory.
type memSink struct {
	mu   sync.Mutex
	recs []audit.Record
	err  error
	seen int
}

func (m *memSink) Write(_ context.Context, r audit.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, r)
	return nil
}

func (m *memSink) Err() error { return m.err }

// last returns the newest record once one newer than the previous call's has been written (the
// gateway writes a request's record after the client has its response), or an empty record
// after a second.
func (m *memSink) last() audit.Record {
	var r audit.Record
	wait.Until(time.Second, "a record newer than the last one read", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.recs) > m.seen {
			m.seen = len(m.recs)
			r = m.recs[len(m.recs)-1]
			return true
		}
		return false
	})
	return r
}

// count is how many records have been written.
func (m *memSink) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.recs)
}

// nth returns record i (0-based) once it is written, waiting up to a second.
func (m *memSink) nth(i int) (audit.Record, bool) {
	var r audit.Record
	err := wait.Until(time.Second, fmt.Sprintf("record %d", i), func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.recs) > i {
			r = m.recs[i]
			return true
		}
		return false
	})
	return r, err == nil
}

// await returns the first record that satisfies pred, waiting up to a second.
func (m *memSink) await(pred func(audit.Record) bool) (audit.Record, bool) {
	var found audit.Record
	err := wait.Until(time.Second, "a record that satisfies the test's condition", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, r := range m.recs {
			if pred(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found, err == nil
}

// refusingDialer records every dial and refuses those not to allowed addresses, so an SSRF
// regression fails the test instead of sending traffic anywhere.
type refusingDialer struct {
	mu      sync.Mutex
	allowed map[string]bool
	dialed  []string
}

func (d *refusingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	ok := d.allowed[addr]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("test dialer refuses %s", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *refusingDialer) saw(addr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.dialed {
		if a == addr {
			return true
		}
	}
	return false
}

type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// failingResolver fails every lookup as Go's resolver does, naming the server it asked.
type failingResolver struct{}

func (failingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "server misbehaving", Name: host, Server: "10.0.0.2:53"}
}

const testSecret = "s3cr3t-value-0123456789"

// The secret of basic-auth entries: a password with every character that URL, JSON and HTML
// escaping change.
const (
	testUser     = "svc-user"
	testPassword = `pa55/w+rd&"<q>=?%x`
)

type harness struct {
	mu       sync.Mutex // guards scopes and bindErr once requests are in flight
	proxy    *httptest.Server
	upstream *httptest.Server
	ca       *ca.Authority
	sink     *memSink
	dialer   *refusingDialer
	scopes   []scope.Scope
	bindErr  error
	brokErr  error
	got      chan http.Header
	// plain is an HTTP upstream pinned as plain.example.test:80; uris is every request target
	// either upstream received, in order.
	plain *httptest.Server
	uris  []string
	asked atomic.Int64 // broker calls
	// handle, when set (under mu), answers for the TLS upstream instead of its echo.
	handle http.HandlerFunc
	target string // CONNECT target of rawIntercepted; empty means api.example.test:443
}

// answer makes the TLS upstream answer with f.
func (h *harness) answer(f http.HandlerFunc) {
	h.mu.Lock()
	h.handle = f
	h.mu.Unlock()
}

// received returns the request targets the upstreams have seen so far.
func (h *harness) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.uris...)
}

func (h *harness) saw(r *http.Request) {
	h.mu.Lock()
	h.uris = append(h.uris, r.RequestURI)
	h.mu.Unlock()
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	auth, err := ca.LoadOrCreate(t.TempDir(), "test CA")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{ca: auth, sink: &memSink{}, got: make(chan http.Header, 16)}
	h.scopes = []scope.Scope{
		{Host: "api.example.test", Credential: "demo", Methods: []string{"GET", "POST"}, Paths: []string{"/v1/*", "/echo"}},
		{Host: "open.example.test"},
		{Host: "private.example.test"},
		{Host: "zoned.example.test"},
		{Host: "plain.example.test", Paths: []string{"/v1/*"}},
	}
	leaf, err := auth.Leaf("api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	h.upstream = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.saw(r)
		h.mu.Lock()
		handle := h.handle
		h.mu.Unlock()
		if handle != nil {
			handle(w, r)
			return
		}
		h.got <- r.Header.Clone()
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "auth=%s path=%s", r.Header.Get("Authorization"), r.URL.Path)
	}))
	h.upstream.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	h.upstream.StartTLS()
	t.Cleanup(h.upstream.Close)
	up := h.upstream.Listener.Addr().String()
	h.plain = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.saw(r)
		fmt.Fprintf(w, "plain path=%s", r.URL.EscapedPath())
	}))
	t.Cleanup(h.plain.Close)
	plain := h.plain.Listener.Addr().String()
	h.dialer = &refusingDialer{allowed: map[string]bool{up: true, plain: true}}
	catalog, err := broker.NewCatalog([]broker.Entry{{
		Name: "demo", Source: broker.Source{Kind: broker.SourceKV, Path: "demo"},
		Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "Bearer {{.token}}"},
		Hosts:  []string{"api.example.test"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{
		Node: "n1",
		Bindings: &fakeBindings{lookup: func(ctx context.Context, addr netip.Addr) (binding.Binding, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.bindErr != nil {
				return binding.Binding{}, h.bindErr
			}
			set, err := scope.Parse(h.scopes)
			if err != nil {
				return binding.Binding{}, err
			}
			return binding.Binding{Lease: "l-1", Task: "task-1", Addr: addr, Expires: time.Now().Add(time.Hour), Scopes: set}, nil
		}},
		CA: auth, Catalog: catalog, Audit: h.sink,
		Broker: &fakeBroker{get: func(_ context.Context, _ string, e *broker.Entry) (broker.Secret, error) {
			h.asked.Add(1)
			if h.brokErr != nil {
				return nil, h.brokErr
			}
			if e.Inject.Kind == broker.InjectBasic {
				return broker.Secret{"username": testUser, "password": testPassword}, nil
			}
			return broker.Secret{"token": testSecret}, nil
		}},
		PrivateUpstreams: map[string]netip.AddrPort{"api.example.test:443": netip.MustParseAddrPort(up),
			"plain.example.test:80": netip.MustParseAddrPort(plain)},
		UpstreamRoots: auth.Pool(),
		Resolver: staticResolver{
			"private.example.test": {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("169.254.169.254")},
			"open.example.test":    {netip.MustParseAddr("::ffff:127.0.0.1")},
			"zoned.example.test":   {netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("::1%lo")},
		},
		Dialer: h.dialer,
	})
	h.proxy = httptest.NewServer(p)
	t.Cleanup(h.proxy.Close)
	return h
}

// intercept opens an intercepted CONNECT to target ("host:port") and returns the TLS session
// inside it, speaking HTTP/1.1.
func (h *harness) intercept(t testing.TB, target string) *tls.Conn {
	t.Helper()
	c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	host, _, _ := net.SplitHostPort(target)
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: h.ca.Pool(), NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS inside CONNECT %s: %v", target, err)
	}
	return tc
}

func (h *harness) client() *http.Client {
	pu, _ := url.Parse(h.proxy.URL)
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(pu),
		TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool()},
	}, Timeout: 10 * time.Second}
}

func TestInjectStripScrub(t *testing.T) {
	h := newHarness(t)
	req, _ := http.NewRequest("GET", "https://api.example.test/echo", nil)
	req.Header.Set("Authorization", "Bearer forged")
	resp, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := <-h.got
	if v := got.Values("Authorization"); len(v) != 1 || v[0] != "Bearer "+testSecret {
		t.Fatalf("upstream saw Authorization %q", v)
	}
	if strings.Contains(string(body), testSecret) || !strings.Contains(string(body), "auth=Bearer [redacted]") {
		t.Fatalf("body not scrubbed: %q", body)
	}
	if resp.Header.Get("X-Echo") != "Bearer [redacted]" {
		t.Fatalf("header not scrubbed: %q", resp.Header.Get("X-Echo"))
	}
	rec := h.sink.last()
	if rec.Decision != audit.Allow || rec.Credential != "demo" || rec.Lease != "l-1" || rec.Status != 200 || rec.Path != "/echo" {
		t.Fatalf("audit record %+v", rec)
	}
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(h *harness)
		method string
		url    string
		status int
		rule   rule.Rule
		noDial string // an address that must never be dialed
		untold string // what the record keeps and the sandbox must never be told
	}{
		{name: "unknown source", setup: func(h *harness) { h.bindErr = binding.ErrUnknown },
			url: "https://api.example.test/v1/x", status: 407, rule: rule.NoLease},
		{name: "store down", setup: func(h *harness) { h.bindErr = binding.ErrUnavailable },
			url: "https://api.example.test/v1/x", status: 503, rule: rule.StoreDown},
		{name: "store down, its error named", setup: func(h *harness) {
			h.bindErr = fmt.Errorf("%w: dial tcp 127.0.0.1:6379: connect: connection refused", binding.ErrUnavailable)
		}, url: "http://api.example.test/v1/x", status: 503, rule: rule.StoreDown, untold: "127.0.0.1:6379"},
		{name: "host outside scopes", url: "https://evil.example.test/", status: 403, rule: rule.ScopeMiss},
		{name: "plain http outside scopes", url: "http://evil.example.test/", status: 403, rule: rule.ScopeMiss},
		{name: "path outside scope", url: "https://api.example.test/admin", status: 403, rule: rule.ScopeMiss},
		{name: "method outside scope", method: "DELETE", url: "https://api.example.test/v1/x", status: 403, rule: rule.ScopeMiss},
		{name: "ip literal without cidr scope", url: "https://93.184.215.14/", status: 403, rule: rule.ScopeMiss},
		{name: "name resolving to private and metadata addresses", url: "http://private.example.test/", status: 403,
			rule: rule.PrivateAddress, noDial: "169.254.169.254:80", untold: "169.254.169.254"},
		{name: "name resolving to mapped loopback", url: "http://open.example.test/", status: 403,
			rule: rule.PrivateAddress, noDial: "127.0.0.1:80", untold: "127.0.0.1"},
		{name: "name resolving to a zoned link-local address", url: "http://zoned.example.test/", status: 403,
			rule: rule.PrivateAddress, noDial: "[fe80::1%eth0]:80", untold: "fe80::1"},
		{name: "lookup failing, naming the gateway's resolver", setup: func(h *harness) {
			h.proxyHandler().dial.resolver = failingResolver{}
		}, url: "http://open.example.test/", status: 502, rule: rule.UpstreamFailed, untold: "10.0.0.2:53"},
		{name: "vault down", setup: func(h *harness) {
			h.brokErr = fmt.Errorf("%w: Put \"https://127.0.0.1:8200/v1/auth/approle/login\": dial tcp 127.0.0.1:8200: connection refused", broker.ErrUnavailable)
		}, url: "https://api.example.test/v1/x", status: 503, rule: rule.CredentialDown, untold: "127.0.0.1:8200"},
		{name: "audit down", setup: func(h *harness) {
			h.sink.err = fmt.Errorf("%w: write /var/lib/airlock/audit/000001.jsonl: no space left on device", audit.ErrUnavailable)
		}, url: "https://api.example.test/v1/x", status: 503, rule: rule.AuditDown, untold: "/var/lib/airlock/audit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if tt.setup != nil {
				tt.setup(h)
			}
			method := tt.method
			if method == "" {
				method = "GET"
			}
			req, _ := http.NewRequest(method, tt.url, nil)
			resp, err := h.client().Do(req)
			status := 0
			told := ""
			if err == nil {
				status = resp.StatusCode
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rule.Rule(resp.Header.Get("X-Airlock-Rule")) != tt.rule {
					t.Errorf("rule header %q, want %q", resp.Header.Get("X-Airlock-Rule"), tt.rule)
				}
				told = fmt.Sprint(resp.Header) + string(body)
			} else if !strings.Contains(err.Error(), http.StatusText(tt.status)) {
				// A refused CONNECT surfaces as a client error naming the status.
				t.Fatalf("request error %v, want status %d", err, tt.status)
			} else {
				status = tt.status
			}
			if status != tt.status {
				t.Fatalf("status %d, want %d", status, tt.status)
			}
			rec := h.sink.last()
			if rec.Decision != audit.Deny || rec.Rule != tt.rule || rec.Reason == "" {
				t.Fatalf("audit record %+v, want deny by %s with a reason", rec, tt.rule)
			}
			if tt.untold != "" {
				if told == "" || strings.Contains(told, tt.untold) {
					t.Errorf("the sandbox is told %q: want an answer that does not name %s", told, tt.untold)
				}
				if !strings.Contains(rec.Reason, tt.untold) {
					t.Errorf("the record's reason %q lost %s", rec.Reason, tt.untold)
				}
			}
			if tt.noDial != "" && h.dialer.saw(tt.noDial) {
				t.Fatalf("the gateway dialed %s", tt.noDial)
			}
			select {
			case hd := <-h.got:
				t.Fatalf("a refused request reached the upstream: %v", hd)
			default:
			}
		})
	}
}

// TestHostMismatch sends, inside an intercepted CONNECT, an SNI or Host that names another host.
func TestHostMismatch(t *testing.T) {
	h := newHarness(t)
	connect := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		return c
	}
	t.Run("SNI names another host", func(t *testing.T) {
		c := connect(t)
		tc := tls.Client(c, &tls.Config{ServerName: "open.example.test", RootCAs: h.ca.Pool()})
		if err := tc.Handshake(); err == nil {
			t.Fatal("handshake with a mismatched SNI succeeded")
		}
		if rec := h.sink.last(); rec.Rule != rule.HostMismatch {
			t.Fatalf("audit record %+v", rec)
		}
	})
	t.Run("Host header names another host", func(t *testing.T) {
		c := connect(t)
		tc := tls.Client(c, &tls.Config{ServerName: "api.example.test", RootCAs: h.ca.Pool()})
		fmt.Fprintf(tc, "GET /v1/x HTTP/1.1\r\nHost: open.example.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 403 || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.HostMismatch {
			t.Fatalf("status %d rule %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
		}
	})
}

func TestScrubReaderAcrossChunks(t *testing.T) {
	sc := newScrubber([]string{testSecret}, nil)
	body := strings.Repeat("x", 100) + testSecret + strings.Repeat("y", 50) + testSecret
	// One byte per read: every split point of the secret is crossed.
	r := sc.reader(io.NopCloser(&oneByteReader{s: body}), nil)
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("x", 100) + redacted + strings.Repeat("y", 50) + redacted
	if string(out) != want {
		t.Fatalf("got %q", out)
	}
	for _, f := range sc.forms {
		out, _ := io.ReadAll(sc.reader(io.NopCloser(strings.NewReader("a"+string(f.b)+"b")), nil))
		if strings.Contains(string(out), string(f.b)) {
			t.Fatalf("form %q not scrubbed", f.b)
		}
	}
}

type oneByteReader struct {
	s string
	i int
}

func (o *oneByteReader) Read(p []byte) (int, error) {
	if o.i >= len(o.s) {
		return 0, io.EOF
	}
	p[0] = o.s[o.i]
	o.i++
	return 1, nil
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, h.proxyHandler(), h.ca)
	c := h.client()
	for _, u := range []string{"https://api.example.test/v1/x", "https://api.example.test/v1/y", "https://evil.example.test/"} {
		if resp, err := c.Get(u); err == nil {
			resp.Body.Close()
		}
		h.sink.last()
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("allow", rule.Scope.String())); v != 2 {
		t.Fatalf("allow/scope = %v", v)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("deny", rule.ScopeMiss.String())); v != 1 {
		t.Fatalf("deny/scope-miss = %v", v)
	}
	hits, misses := h.ca.CacheStats()
	if misses < 1 || hits < 1 {
		t.Fatalf("certificate cache hits %d misses %d", hits, misses)
	}
	if n, err := testutil.GatherAndCount(reg, "airlock_gateway_request_duration_seconds", "airlock_gateway_open_tunnels"); err != nil || n != 3 {
		t.Fatalf("gathered %d series: %v", n, err)
	}
}
