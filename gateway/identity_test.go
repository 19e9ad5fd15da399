package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

func TestBudgets(t *testing.T) {
	h := newHarness(t)
	p := h.proxyHandler()
	p.Reload(p.dyn.Load().catalog, p.dyn.Load().pins, nil, budget.Budget{Requests: 3, BytesUp: 1000})
	c := h.client()
	for i := range 4 {
		resp, err := c.Get("https://api.example.test/v1/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 200
		if i == 3 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
		if i < 3 {
			<-h.got
		}
	}
	if _, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == rule.Budget && r.Status == 429 }); !ok {
		t.Fatal("no audit record for the refused request")
	}

	// Bytes: a fresh lease whose token narrows the byte budget to 400: room for the heads of the
	// CONNECT and the request, not for them and the body.
	h2 := newHarness(t)
	p2 := h2.proxyHandler()
	p2.Reload(p2.dyn.Load().catalog, p2.dyn.Load().pins, nil, budget.Budget{BytesUp: 1000})
	bindings := h2.proxyHandler().cfg.Bindings.(*fakeBindings)
	inner := bindings.lookup
	bindings.lookup = func(ctx context.Context, a netip.Addr) (binding.Binding, error) {
		b, err := inner(ctx, a)
		b.Lease, b.Budget = "l-2", budget.Budget{BytesUp: 400}
		return b, err
	}
	resp, err := h2.client().Post("https://api.example.test/v1/x", "text/plain", strings.NewReader(strings.Repeat("x", 500)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("over-budget upload: status %d", resp.StatusCode)
	}
}

func TestProxyAuthorizationForClientsOutsideThePool(t *testing.T) {
	h := newHarness(t)
	h.bindErr = binding.ErrUnknown // the client's address holds no lease
	dev, _ := token.NewDevIssuer("dev", "aud")
	v := &token.Verifier{Audience: "aud", Issuers: map[string]token.Issuer{"dev": dev.Issuer(time.Hour)}}
	p := h.proxyHandler()
	p.tokens.admit = func(_ context.Context, raw string) (token.Task, error) { return v.VerifyFor(raw, "") }
	raw, _ := dev.Mint("task-9", "", []scope.Scope{{Host: "api.example.test", Credential: "demo"}}, time.Minute)

	pu, _ := url.Parse(h.proxy.URL)
	tr := h.client().Transport.(*http.Transport)
	tr.Proxy = http.ProxyURL(pu)
	tr.ProxyConnectHeader = http.Header{"Proxy-Authorization": {"Bearer " + raw}}
	resp, err := (&http.Client{Transport: tr}).Get("https://api.example.test/v1/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := <-h.got; got.Get("Proxy-Authorization") != "" || got.Get("Authorization") != "Bearer "+testSecret {
		t.Fatalf("upstream saw %v", got)
	}
	if rec := h.sink.last(); rec.Task != "task-9" || !strings.HasPrefix(rec.Lease, "token:") {
		t.Fatalf("audit %+v", rec)
	}

	// With the lease store down, a token is refused as the store's failure (503), and the client
	// is not told the store's address; the record keeps it.
	p.tokens.admit = func(context.Context, string) (token.Task, error) {
		return token.Task{}, fmt.Errorf("%w: claiming the token's id: redis: dial tcp 10.9.8.7:6379: connect: connection refused", binding.ErrUnavailable)
	}
	down, _ := dev.Mint("task-10", "", []scope.Scope{{Host: "api.example.test", Credential: "demo"}}, time.Minute)
	c, _ := net.Dial("tcp", h.proxy.Listener.Addr().String())
	fmt.Fprintf(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\nProxy-Authorization: Bearer %s\r\n\r\n", down)
	dresp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(dresp.Body)
	c.Close()
	if dresp.StatusCode != http.StatusServiceUnavailable || strings.Contains(fmt.Sprint(dresp.Header)+string(body), "10.9.8.7") {
		t.Fatalf("store down: %d %v %s: want 503 naming no address", dresp.StatusCode, dresp.Header, body)
	}
	if rec := h.sink.last(); rec.Rule != rule.StoreDown || !strings.Contains(rec.Reason, "10.9.8.7:6379") {
		t.Fatalf("record %+v: want the store's error kept", rec)
	}
	p.tokens.admit = func(_ context.Context, raw string) (token.Task, error) { return v.VerifyFor(raw, "") }

	// A forged token, and no token at all, are refused with 407.
	for _, hdr := range []string{"Bearer " + raw[:len(raw)-4] + "AAAA", ""} {
		c, _ := net.Dial("tcp", h.proxy.Listener.Addr().String())
		fmt.Fprintf(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\nProxy-Authorization: %s\r\n\r\n", hdr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
			t.Fatalf("header %q: %v %v", hdr, resp, err)
		}
	}
}

func TestTunnelScope(t *testing.T) {
	// An SSH-like TCP server: it greets, then echoes.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "SSH-2.0-test\r\n")
				io.Copy(c, c)
			}()
		}
	}()
	h := newHarness(t)
	h.scopes = []scope.Scope{{Host: "git.example.test", Ports: []int{22}, Tunnel: true}, {Host: "api.example.test"}}
	p := h.proxyHandler()
	p.dyn.Load().pins["git.example.test:22"] = netip.MustParseAddrPort(l.Addr().String())
	h.dialer.allowed[l.Addr().String()] = true

	connect := func(target string) (*http.Response, net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, c, br
	}
	resp, c, br := connect("git.example.test:22")
	if resp.StatusCode != 200 {
		t.Fatalf("tunnel CONNECT: %d", resp.StatusCode)
	}
	if line, _ := br.ReadString('\n'); line != "SSH-2.0-test\r\n" {
		t.Fatalf("greeting %q", line)
	}
	io.WriteString(c, "ping\n")
	if line, _ := br.ReadString('\n'); line != "ping\n" {
		t.Fatalf("echo %q", line)
	}
	// Tunnel scopes open only their own port; an ordinary scope never gets a raw tunnel.
	if resp, _, _ := connect("git.example.test:443"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("tunnel host on another port: %d", resp.StatusCode)
	}
	if resp, _, _ := connect("api.example.test:22"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("non-tunnel host on port 22: %d", resp.StatusCode)
	}
}

// TestReloadKeepsConnections swaps the settings under an open, kept-alive intercepted connection:
// the connection survives and its next request is decided under the new settings.
func TestReloadKeepsConnections(t *testing.T) {
	h := newHarness(t)
	p := h.proxyHandler()
	c := h.client()
	get := func() (int, bool) {
		reused := false
		req, _ := http.NewRequest("GET", "https://api.example.test/v1/x", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
		}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, reused
	}
	if st, _ := get(); st != 200 {
		t.Fatalf("before reload: %d", st)
	}
	<-h.got
	empty, _ := broker.NewCatalog(nil)
	p.Reload(empty, p.dyn.Load().pins, nil, budget.Budget{})
	st, reused := get()
	if !reused {
		t.Fatal("the reload dropped the open connection")
	}
	if st != http.StatusForbidden {
		t.Fatalf("after removing the credential from the catalog: %d, want 403", st)
	}
}
