package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/scope"
)

// benchHarness is the test harness with an upstream that answers at once and a real file
// audit sink, so the numbers include writing the trail.
func benchHarness(b *testing.B, credential bool) (*harness, *http.Client) {
	b.Helper()
	h := newHarness(b)
	sink, err := audit.OpenFile(audit.FileConfig{Dir: b.TempDir(), Queue: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sink.Close() })
	p := h.proxyHandler()
	p.cfg.Audit = sink
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
	b.Cleanup(plain.Close)
	p.dyn.Load().pins["api.example.test:80"] = netip.MustParseAddrPort(plain.Listener.Addr().String())
	h.dialer.allowed[plain.Listener.Addr().String()] = true
	h.upstream.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	h.scopes = []scope.Scope{{Host: "api.example.test"}}
	if credential {
		h.scopes[0].Credential = "demo"
	}
	pu, _ := url.Parse(h.proxy.URL)
	c := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool()}, MaxIdleConnsPerHost: 8,
	}}
	return h, c
}

func benchGet(b *testing.B, c *http.Client, u string) {
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkPlainHTTP is one kept-alive absolute-form request through the gateway (client,
// proxy and upstream in one process: allocations are the whole path's).
func BenchmarkPlainHTTP(b *testing.B) {
	_, c := benchHarness(b, false)
	benchGet(b, c, "http://api.example.test/x")
}

// BenchmarkInterceptedHTTPS is one request on a kept-alive intercepted TLS connection.
func BenchmarkInterceptedHTTPS(b *testing.B) {
	_, c := benchHarness(b, false)
	benchGet(b, c, "https://api.example.test/x")
}

// BenchmarkInterceptedHTTPSInjected adds a cached credential and response scrubbing.
func BenchmarkInterceptedHTTPSInjected(b *testing.B) {
	_, c := benchHarness(b, true)
	benchGet(b, c, "https://api.example.test/x")
}

// BenchmarkInterceptedHTTPSBudget is BenchmarkInterceptedHTTPS under a byte budget it never
// reaches, so each request's head is reserved and recorded.
func BenchmarkInterceptedHTTPSBudget(b *testing.B) {
	h, c := benchHarness(b, false)
	p := h.proxyHandler()
	p.Reload(p.dyn.Load().catalog, p.dyn.Load().pins, nil, budget.Budget{BytesUp: 1 << 60})
	benchGet(b, c, "https://api.example.test/x")
}

// BenchmarkPlainHTTPBudget is BenchmarkPlainHTTP under a byte budget it never reaches.
func BenchmarkPlainHTTPBudget(b *testing.B) {
	h, c := benchHarness(b, false)
	p := h.proxyHandler()
	p.Reload(p.dyn.Load().catalog, p.dyn.Load().pins, nil, budget.Budget{BytesUp: 1 << 60})
	benchGet(b, c, "http://api.example.test/x")
}

// BenchmarkHeadSize measures a browser-sized request head, as every request's is measured for
// the budget and its record: it must not allocate.
func BenchmarkHeadSize(b *testing.B) {
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET /v1/repos/acme/app/issues?state=open&per_page=100 HTTP/1.1\r\n" +
		"Host: api.example.test\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36\r\nAccept: application/json\r\n" +
		"Accept-Language: en-GB,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br\r\nCookie: a=1; b=2; session=0123456789abcdef\r\n" +
		"Referer: https://api.example.test/\r\nConnection: keep-alive\r\n\r\n")))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		n += headSize(r)
	}
	if n == 0 {
		b.Fatal("no head measured")
	}
}

// BenchmarkDirectHTTP is the same request without the gateway: the client's and upstream's share
// of the allocations, to subtract from BenchmarkPlainHTTP.
func BenchmarkDirectHTTP(b *testing.B) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	b.Cleanup(plain.Close)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	benchGet(b, c, plain.URL+"/x")
}
