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
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// redirected starts the harness's gateway answering redirected connections, each reported as
// headed for dst, and returns the address to dial in its stead.
func (h *harness) redirected(t *testing.T, dst string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := h.proxy.Config.Handler.(*Proxy)
	go p.ServeTransparent(l, func(net.Conn) (netip.AddrPort, error) { return netip.MustParseAddrPort(dst), nil })
	return l.Addr().String()
}

// tlsSession opens a TLS session with server name sni to addr.
func (h *harness) tlsSession(t *testing.T, addr, sni string) (*tls.Conn, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: h.ca.Pool(), NextProtos: []string{"http/1.1"}})
	return tc, tc.Handshake()
}

// tlsGet sends GET path over TLS with server name sni to addr and returns the response.
func (h *harness) tlsGet(t *testing.T, addr, sni, path string, header ...string) (*http.Response, string, error) {
	t.Helper()
	tc, err := h.tlsSession(t, addr, sni)
	if err != nil {
		return nil, "", err
	}
	return get(tc, sni, path, header...)
}

// get sends GET path on an open session and reads the response.
func get(tc *tls.Conn, sni, path string, header ...string) (*http.Response, string, error) {
	fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", path, sni, strings.Join(header, ""))
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), nil
}

// A client that ignores the proxy and dials port 443 or 80 of any address gets exactly the
// proxy's rules: the destination is its server name or Host, never the address it dialed,
// which only goes in the record.
func TestTransparentFollowsProxyRules(t *testing.T) {
	h := newHarness(t)
	tlsAddr := h.redirected(t, "203.0.113.7:443")

	t.Run("TLS to an allowed name: credential injected, sandbox's own stripped, scrubbed", func(t *testing.T) {
		resp, body, err := h.tlsGet(t, tlsAddr, "api.example.test", "/echo", "Authorization: Bearer forged\r\n")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET: %v %v", resp, err)
		}
		got := <-h.got
		if v := got.Values("Authorization"); len(v) != 1 || v[0] != "Bearer "+testSecret {
			t.Fatalf("upstream saw Authorization %q", v)
		}
		if strings.Contains(body, testSecret) || !strings.Contains(body, "[redacted]") {
			t.Fatalf("the response was not scrubbed: %q", body)
		}
		rec, ok := h.sink.await(func(r audit.Record) bool { return r.Path == "/echo" && r.Dest != "" })
		if !ok || rec.Dest != "203.0.113.7:443" || rec.Host != "api.example.test" || rec.Credential != "demo" || rec.Decision != audit.Allow {
			t.Fatalf("record %+v", rec)
		}
	})

	t.Run("TLS to a name outside the scopes: refused in HTTP, recorded", func(t *testing.T) {
		resp, body, err := h.tlsGet(t, tlsAddr, "evil.example.test", "/")
		if err != nil || resp.StatusCode != http.StatusForbidden || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.ScopeMiss {
			t.Fatalf("GET: %v %v %q", resp, err, body)
		}
		if rec, ok := h.sink.await(func(r audit.Record) bool { return r.Host == "evil.example.test" }); !ok || rec.Dest != "203.0.113.7:443" || rec.Rule != rule.ScopeMiss {
			t.Fatalf("record %+v", rec)
		}
	})

	t.Run("a session its lease never allowed outlives the recheck of open connections", func(t *testing.T) {
		// The recheck closes sessions their lease no longer allows; one that only ever carries
		// refusals must not be cut before the refusal is sent (seen as a broken pipe in CI).
		tc, err := h.tlsSession(t, tlsAddr, "evil.example.test")
		if err != nil {
			t.Fatal(err)
		}
		h.proxy.Config.Handler.(*Proxy).recheck(context.Background())
		resp, body, err := get(tc, "evil.example.test", "/after-recheck")
		if err != nil || resp.StatusCode != http.StatusForbidden || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.ScopeMiss {
			t.Fatalf("GET after the recheck: %v %v %q", resp, err, body)
		}
		if _, ok := h.sink.await(func(r audit.Record) bool { return r.Path == "/after-recheck" && r.Rule == rule.ScopeMiss }); !ok {
			t.Fatal("no record of the refusal")
		}
	})

	t.Run("TLS without a server name: refused, recorded", func(t *testing.T) {
		c, _ := net.Dial("tcp", tlsAddr)
		defer c.Close()
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Fatal("a handshake without a server name succeeded")
		}
		if rec, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == rule.HostMismatch && r.Dest != "" }); !ok || !strings.Contains(rec.Reason, "names no server") {
			t.Fatalf("record %+v", rec)
		}
	})

	t.Run("plain HTTP goes to its Host on the port dialed", func(t *testing.T) {
		addr := h.redirected(t, "198.51.100.9:80")
		send := func(req string) (*http.Response, string) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, req)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%q: %v", req, err)
			}
			b, _ := io.ReadAll(resp.Body)
			return resp, string(b)
		}
		if resp, body := send("GET /v1/a HTTP/1.1\r\nHost: plain.example.test\r\nConnection: close\r\n\r\n"); resp.StatusCode != 200 || body != "plain path=/v1/a" {
			t.Fatalf("allowed request: %d %q", resp.StatusCode, body)
		}
		for _, c := range []struct {
			req  string
			rule rule.Rule
		}{
			{"GET /v1/a HTTP/1.1\r\nHost: plain.example.test:8080\r\n\r\n", rule.HostMismatch},
			{"GET http://plain.example.test/v1/a HTTP/1.1\r\nHost: plain.example.test\r\n\r\n", rule.BadRequest},
			{"CONNECT plain.example.test:80 HTTP/1.1\r\nHost: plain.example.test:80\r\n\r\n", rule.BadRequest},
			{"GET /v1/a HTTP/1.1\r\nHost: evil.example.test\r\n\r\n", rule.ScopeMiss},
			{"GET /other HTTP/1.1\r\nHost: plain.example.test\r\n\r\n", rule.ScopeMiss},
		} {
			if resp, body := send(c.req); rule.Rule(resp.Header.Get("X-Airlock-Rule")) != c.rule {
				t.Errorf("%q: %d %s %q, want rule %s", c.req, resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), body, c.rule)
			}
		}
		if rec, ok := h.sink.await(func(r audit.Record) bool {
			return r.Path == "/v1/a" && r.Dest == "198.51.100.9:80" && r.Decision == audit.Allow
		}); !ok {
			t.Fatalf("no allow record with the dialed address: %+v", rec)
		}
	})

	t.Run("a connection that says nothing is closed and recorded", func(t *testing.T) {
		p := h.proxy.Config.Handler.(*Proxy)
		p.redirectWait.Store(int64(200 * time.Millisecond))
		defer p.redirectWait.Store(0)
		c, _ := net.Dial("tcp", tlsAddr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("the gateway answered a connection that sent nothing")
		}
		if rec, ok := h.sink.await(func(r audit.Record) bool { return strings.Contains(r.Reason, "sent nothing") }); !ok || rec.Rule != rule.BadRequest {
			t.Fatalf("record %+v", rec)
		}
	})

	t.Run("TLS under a tunnel scope is relayed to the name, not intercepted", func(t *testing.T) {
		leaf, _ := h.ca.Leaf("tunnel.example.test")
		up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the real server") }))
		up.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
		up.StartTLS()
		defer up.Close()
		p := h.proxy.Config.Handler.(*Proxy)
		d := p.dyn.Load()
		pins := map[string]netip.AddrPort{"tunnel.example.test:443": netip.MustParseAddrPort(up.Listener.Addr().String())}
		for k, v := range d.pins {
			pins[k] = v
		}
		p.Reload(d.catalog, pins, nil, d.budget)
		h.dialer.mu.Lock()
		h.dialer.allowed[up.Listener.Addr().String()] = true
		h.dialer.mu.Unlock()
		h.mu.Lock()
		h.scopes = append(h.scopes, scope.Scope{Host: "tunnel.example.test", Ports: []int{443}, Tunnel: true})
		h.mu.Unlock()
		resp, body, err := h.tlsGet(t, tlsAddr, "tunnel.example.test", "/")
		if err != nil || resp.StatusCode != 200 || body != "the real server" {
			t.Fatalf("through the tunnel: %v %v %q", resp, err, body)
		}
		if rec, ok := h.sink.await(func(r audit.Record) bool { return r.Host == "tunnel.example.test" && r.Event == "close" }); !ok || rec.Dest != "203.0.113.7:443" || rec.BytesUp == 0 {
			t.Fatalf("tunnel record %+v", rec)
		}
	})
}
