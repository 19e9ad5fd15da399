package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// smugglingShapes are requests whose framing two HTTP parsers could read differently.
var smugglingShapes = []struct {
	name, head, body string
	rule             rule.Rule
}{
	{"content-length with transfer-encoding", "POST /v1/x HTTP/1.1\r\nHost: H\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", "0\r\n\r\n", rule.BadRequest},
	{"duplicate host", "GET /v1/x HTTP/1.1\r\nHost: H\r\nHost: evil.example\r\n\r\n", "", ""},
	{"obsolete line folding", "GET /v1/x HTTP/1.1\r\nHost: H\r\nX-A: b\r\n c\r\n\r\n", "", rule.BadRequest},
	{"bad chunk size", "POST /v1/x HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n", "zz\r\nabc\r\n0\r\n\r\n", rule.BadRequest},
	{"signed chunk size", "POST /v1/x HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n", "+3\r\nabc\r\n0\r\n\r\n", rule.BadRequest},
	{"two content-lengths", "POST /v1/x HTTP/1.1\r\nHost: H\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "xx", rule.BadRequest},
	{"transfer-encoding list", "POST /v1/x HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "0\r\n\r\n", rule.BadRequest},
	{"space before colon", "GET /v1/x HTTP/1.1\r\nHost: H\r\nTransfer-Encoding : chunked\r\n\r\n", "0\r\n\r\n", rule.BadRequest},
}

func serveHarness(t *testing.T, h *harness) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := h.proxyHandler()
	go p.Serve(l)
	t.Cleanup(func() { p.Close() })
	return l.Addr().String()
}

func TestSmugglingRefused(t *testing.T) {
	for _, intercepted := range []bool{false, true} {
		for _, sh := range smugglingShapes {
			name := "plain/" + sh.name
			if intercepted {
				name = "intercepted/" + sh.name
			}
			t.Run(name, func(t *testing.T) {
				h := newHarness(t)
				h.scopes = []scope.Scope{{Host: "api.example.test"}}
				addr := serveHarness(t, h)
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				var rw io.ReadWriter = c
				head := sh.head
				if intercepted {
					fmt.Fprintf(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
					br := bufio.NewReader(c)
					if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
						t.Fatalf("CONNECT: %v", err)
					}
					tc := tls.Client(c, &tls.Config{ServerName: "api.example.test", RootCAs: h.ca.Pool(), NextProtos: []string{"http/1.1"}})
					rw = tc
					head = strings.Replace(head, "Host: H", "Host: api.example.test", 1)
				} else {
					head = strings.Replace(head, "/v1/x", "http://api.example.test/v1/x", 1)
					head = strings.Replace(head, "Host: H", "Host: api.example.test", 1)
				}
				io.WriteString(rw, head+sh.body)
				resp, err := http.ReadResponse(bufio.NewReader(rw), nil)
				if err != nil {
					t.Fatalf("no response: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("status %d, body %q", resp.StatusCode, body)
				}
				if sh.rule != "" {
					if rule.Rule(resp.Header.Get("X-Airlock-Rule")) != sh.rule {
						t.Fatalf("rule %q, body %q", resp.Header.Get("X-Airlock-Rule"), body)
					}
					if rec := h.sink.last(); rec.Decision != audit.Deny || rec.Rule != sh.rule || rec.Lease != "l-1" {
						t.Fatalf("audit record %+v", rec)
					}
				}
				// The gateway closes the connection after a refusal, and forwards a request
				// before it answers the next: once it has closed this one, whatever it forwarded
				// from it has reached the upstream.
				if _, err := io.Copy(io.Discard, rw); err != nil {
					t.Fatalf("the gateway did not close the connection after the refusal: %v", err)
				}
				select {
				case hd := <-h.got:
					t.Fatalf("the upstream received a smuggling-shaped request: %v", hd)
				default:
				}
			})
		}
	}
}

// TestFramingAllowsValidRequests keeps the framing check honest: pipelined, chunked (with
// extensions and trailers) and fixed-length requests on one connection all pass.
func TestFramingAllowsValidRequests(t *testing.T) {
	h := newHarness(t)
	h.scopes = []scope.Scope{{Host: "api.example.test"}}
	addr := serveHarness(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	reqs := "POST http://api.example.test/a HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 3\r\n\r\nabc" +
		"POST http://api.example.test/b HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: y\r\n\r\n" +
		"GET http://api.example.test/c HTTP/1.1\r\nHost: api.example.test\r\n\r\n"
	// Dribble the bytes in to cross every state boundary.
	go func() {
		for i := 0; i < len(reqs); i++ {
			c.Write([]byte{reqs[i]})
		}
	}()
	br := bufio.NewReader(c)
	for i := range 3 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.ReadAll(resp.Body)
		// The upstream is TLS-only, so these plain requests fail upstream (502); what matters
		// is that none is refused for its framing.
		if resp.StatusCode == http.StatusBadRequest {
			t.Fatalf("request %d refused: %s", i, resp.Header.Get("X-Airlock-Reason"))
		}
	}
}

// Framing checks stay on after a request that only asked to switch protocols: a refused
// CONNECT, a refused upgrade, or an upgrade the upstream did not take. Only a completed switch
// (CONNECT 200, upgrade 101) ends them.
func TestFramingStaysOnAfterRefusedSwitch(t *testing.T) {
	smuggle := "POST http://plain.example.test/v1/x HTTP/1.1\r\nHost: plain.example.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	cases := []struct {
		name, first string
		status      int
	}{
		{"refused upgrade", "GET http://evil.example.test/ HTTP/1.1\r\nHost: evil.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 403},
		{"upgrade the upstream ignored", "GET http://plain.example.test/v1/ws HTTP/1.1\r\nHost: plain.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 200},
		{"refused CONNECT", "CONNECT evil.example.test:443 HTTP/1.1\r\nHost: evil.example.test:443\r\n\r\n", 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			addr := serveHarness(t, h)
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(conn)
			io.WriteString(conn, c.first)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != c.status {
				t.Fatalf("first request: %v %v, want %d", resp, err, c.status)
			}
			io.Copy(io.Discard, resp.Body)
			before := len(h.received())
			io.WriteString(conn, smuggle)
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the smuggled request got no answer: %v", err)
			}
			if resp.StatusCode != http.StatusBadRequest || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.BadRequest {
				t.Fatalf("smuggled request after a %s: status %d rule %q", c.name, resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
			}
			if got := h.received()[before:]; len(got) > 0 {
				t.Fatalf("the smuggled request reached the upstream: %v", got)
			}
		})
	}
	t.Run("intercepted, after a refused upgrade", func(t *testing.T) {
		h := newHarness(t)
		tc := h.intercept(t, "api.example.test:443")
		br := bufio.NewReader(tc)
		io.WriteString(tc, "GET /v1/ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("upgrade with a credential: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		io.WriteString(tc, "POST /v1/x HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		resp, err = http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.BadRequest {
			t.Fatalf("smuggled request inside the session: %v %v", resp, err)
		}
		if got := h.received(); len(got) > 0 {
			t.Fatalf("the smuggled request reached the upstream: %v", got)
		}
	})
}

// A CONNECT sent inside an intercepted session is refused: it would open a tunnel past the
// request checks.
func TestNestedConnectRefused(t *testing.T) {
	h := newHarness(t)
	status, got := rawIntercepted(t, h, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
	if status != http.StatusBadRequest || got != rule.BadRequest || len(h.received()) > 0 {
		t.Fatalf("nested CONNECT: status %d rule %q, upstream saw %v", status, got, h.received())
	}
}
