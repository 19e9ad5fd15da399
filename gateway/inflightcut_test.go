package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// What a cut of a request in flight does beyond closing the sandbox's side (the spec is
// inflight_test.go): the upstream sees the request cut, not completed; an answer streaming down
// is cut too and its upstream request's context cancelled; the record says why; and on a session
// whose host stays allowed, only the refused request is cut, while new requests are decided by
// path as before.

// cutUpstream is what the upstreams of cutHarness report: every line of a request body, tagged
// with its path; how each body ended; and each answer whose request context was cancelled.
type cutUpstream struct {
	lines     chan string
	ended     chan error // the error a body ended with (nil: it ended whole)
	cancelled chan string
}

// cutHarness is a harness whose up.example.test:80 (plain) and ups.example.test:443 (TLS)
// read a POST body line by line and answer "done" at its end, and answer a GET of /down with one
// event, then hold the stream open until its request is cancelled; under scopes that allow paths.
func cutHarness(t *testing.T, paths ...string) (*harness, *cutUpstream) {
	t.Helper()
	h := newHarness(t)
	u := &cutUpstream{lines: make(chan string, 64), ended: make(chan error, 16), cancelled: make(chan string, 16)}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/down" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: 1\n\n")
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				u.cancelled <- r.URL.Path
			case <-time.After(10 * time.Second): // the test's bound: it fails on the missing report
			}
			return
		}
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				u.lines <- r.URL.Path + " " + line
			}
			if err != nil {
				if errors.Is(err, io.EOF) && line == "" {
					err = nil
				}
				u.ended <- err
				break
			}
		}
		io.WriteString(w, "done\n")
	})
	h.pinUpstreams(t, handler, "up.example.test", "ups.example.test")
	h.setScopes(cutScopes(paths...))
	return h, u
}

func cutScopes(paths ...string) []scope.Scope {
	return []scope.Scope{
		{Host: "up.example.test", Ports: []int{80}, Paths: paths},
		{Host: "ups.example.test", Paths: paths},
	}
}

// receive returns the next value of ch, failing t after five seconds.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s within 5s", what)
	}
	panic("unreachable")
}

// closedConn asserts that the sandbox's connection c ends: read to its end, it gives an error
// other than the case's deadline.
func closedConn(t *testing.T, c io.Reader) {
	t.Helper()
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection is still open after the recheck")
	}
}

// cutRecord asserts that the request to path is recorded as cut by the recheck, under rule r.
func cutRecord(t *testing.T, h *harness, path string, r rule.Rule) {
	t.Helper()
	rec, ok := h.sink.await(func(rec audit.Record) bool { return rec.Path == path && rec.Decision == audit.Deny })
	if !ok {
		t.Fatalf("no refusal recorded for %s", path)
	}
	if rec.Rule != r || !strings.HasPrefix(rec.Reason, "cut by the recheck: ") {
		t.Fatalf("the record of the cut request says %s %q, want rule %s and why it was cut", rec.Rule, rec.Reason, r)
	}
}

// cutEndings take away what allowed a request to /up, and name the rule its record must give.
var cutEndings = []struct {
	name string
	rule rule.Rule
	end  func(h *harness)
}{
	{"a swap drops its path", rule.ScopeMiss, func(h *harness) { h.setScopes(cutScopes("/other")) }},
	{"its lease ends", rule.NoLease, func(h *harness) {
		h.mu.Lock()
		h.bindErr = binding.ErrUnknown
		h.mu.Unlock()
	}},
}

// cutPaths open a connection of the sandbox's to host (up.example.test on plain paths,
// ups.example.test inside TLS) on one path a request can take.
var cutPaths = []struct {
	name string
	open func(t *testing.T, h *harness) (c net.Conn, host string)
}{
	{"proxy, absolute form", func(t *testing.T, h *harness) (net.Conn, string) {
		return &absoluteForm{dialTimed(t, h.proxy.Listener.Addr().String())}, "up.example.test"
	}},
	{"redirected plain HTTP", func(t *testing.T, h *harness) (net.Conn, string) {
		return dialTimed(t, h.redirected(t, "198.51.100.9:80")), "up.example.test"
	}},
	{"intercepted CONNECT", func(t *testing.T, h *harness) (net.Conn, string) {
		return h.connectTLS(t, dialTimed(t, h.proxy.Listener.Addr().String()), "ups.example.test:443", "ups.example.test"), "ups.example.test"
	}},
	{"redirected TLS", func(t *testing.T, h *harness) (net.Conn, string) {
		tc, err := h.tlsSession(t, h.redirected(t, "203.0.113.7:443"), "ups.example.test")
		if err != nil {
			t.Fatal(err)
		}
		return tc, "ups.example.test"
	}},
}

// absoluteForm is a connection to the proxy on which a request line's origin-form target is
// written in the absolute form (the first write of each request holds its request line).
type absoluteForm struct{ net.Conn }

func (c *absoluteForm) Write(b []byte) (int, error) {
	if m, target, ok := strings.Cut(string(b), " /"); ok && (m == "GET" || m == "POST") {
		if _, err := io.WriteString(c.Conn, m+" http://up.example.test/"+target); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// A request cut with its body streaming up is cut upstream too: the upstream sees its body end
// in an error, not whole, and the record says why.
func TestInFlightUploadCutUpstreamAndRecorded(t *testing.T) {
	for _, path := range cutPaths {
		for _, ending := range cutEndings {
			t.Run(path.name+"/"+ending.name, func(t *testing.T) {
				h, u := cutHarness(t, "/up")
				c, host := path.open(t, h)
				fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", host)
				chunk(c, "allowed\n")
				if line := receive(t, u.lines, "first chunk upstream"); line != "/up allowed\n" {
					t.Fatalf("upstream got %q", line)
				}
				ending.end(h)
				h.proxyHandler().recheck(context.Background())
				closedConn(t, c)
				if err := receive(t, u.ended, "end of the body upstream"); err == nil {
					t.Fatal("the upstream received the cut request's body as complete")
				}
				cutRecord(t, h, "/up", ending.rule)
			})
		}
	}
}

// An answer streaming down (an event stream) is cut as well: the sandbox's connection closes and
// the upstream request's context is cancelled, so the upstream stops sending to a request its
// lease no longer allows.
func TestInFlightDownloadCut(t *testing.T) {
	for _, path := range cutPaths {
		for _, ending := range cutEndings {
			t.Run(path.name+"/"+ending.name, func(t *testing.T) {
				h, u := cutHarness(t, "/down")
				c, host := path.open(t, h)
				fmt.Fprintf(c, "GET /down HTTP/1.1\r\nHost: %s\r\n\r\n", host)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("GET /down: %v %v", resp, err)
				}
				if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "data: 1\n" {
					t.Fatalf("first event: %q %v", line, err)
				}
				ending.end(h)
				h.proxyHandler().recheck(context.Background())
				if got := receive(t, u.cancelled, "cancelled upstream request"); got != "/down" {
					t.Fatalf("cancelled %q", got)
				}
				closedConn(t, br)
				cutRecord(t, h, "/down", ending.rule)
			})
		}
	}
}

// On an intercepted session whose host stays allowed, a swap that drops one request's path cuts
// that request, in flight, and nothing else: over HTTP/2 the session and another request in it
// go on, and new requests on it are decided by path, as they were before.
func TestInFlightCutOnASessionItsHostKeeps(t *testing.T) {
	t.Run("HTTP/2", func(t *testing.T) {
		h, u := cutHarness(t, "/up", "/other")
		pu, _ := url.Parse(h.proxy.URL)
		var dials atomic.Int32
		c := &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool()}, ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		}, Timeout: 10 * time.Second}
		t.Cleanup(c.CloseIdleConnections)
		type result struct {
			resp *http.Response
			err  error
		}
		post := func(path string) (*io.PipeWriter, <-chan result) {
			pr, pw := io.Pipe()
			t.Cleanup(func() { pw.Close() })
			done := make(chan result, 1)
			go func() {
				resp, err := c.Post("https://ups.example.test"+path, "text/plain", pr)
				if err == nil {
					resp.Body.Close()
				}
				done <- result{resp, err}
			}()
			return pw, done
		}
		up, upDone := post("/up")
		io.WriteString(up, "a1\n")
		if line := receive(t, u.lines, "the first line of /up upstream"); line != "/up a1\n" {
			t.Fatalf("upstream got %q", line)
		}
		other, otherDone := post("/other")
		io.WriteString(other, "b1\n")
		if line := receive(t, u.lines, "the first line of /other upstream"); line != "/other b1\n" {
			t.Fatalf("upstream got %q", line)
		}

		h.setScopes(cutScopes("/other"))
		h.proxyHandler().recheck(context.Background())

		if r := receive(t, upDone, "the end of the cut request"); r.err == nil {
			t.Fatalf("the request to /up went on after its path was dropped: %d", r.resp.StatusCode)
		}
		if err := receive(t, u.ended, "the end of /up's body upstream"); err == nil {
			t.Fatal("the upstream received the cut request's body as complete")
		}
		cutRecord(t, h, "/up", rule.ScopeMiss)
		// The request still allowed goes on, on the same session.
		io.WriteString(other, "b2\n")
		if line := receive(t, u.lines, "the second line of /other upstream"); line != "/other b2\n" {
			t.Fatalf("upstream got %q", line)
		}
		other.Close()
		if r := receive(t, otherDone, "the answer to /other"); r.err != nil || r.resp.StatusCode != http.StatusOK || r.resp.ProtoMajor != 2 {
			t.Fatalf("POST /other: %v %v", r.resp, r.err)
		}
		if err := receive(t, u.ended, "the end of /other's body upstream"); err != nil {
			t.Fatalf("/other's body ended with %v", err)
		}
		// New requests on the session: refused by path, as before the swap.
		for path, want := range map[string]int{"/up": http.StatusForbidden, "/other": http.StatusOK} {
			resp, err := c.Post("https://ups.example.test"+path, "text/plain", strings.NewReader("x\n"))
			if err != nil {
				t.Fatalf("POST %s after the swap: %v", path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != want || want == http.StatusForbidden && rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.ScopeMiss {
				t.Fatalf("POST %s after the swap: %d %s, want %d", path, resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), want)
			}
		}
		if n := dials.Load(); n != 1 {
			t.Fatalf("the client dialed the gateway %d times: the session did not stay open", n)
		}
	})
	t.Run("HTTP/1", func(t *testing.T) {
		// An HTTP/1 connection carries one request at a time: the cut closes it. A second session
		// to the same host stays, and its new requests are decided by path.
		h, u := cutHarness(t, "/up", "/other")
		busy := h.connectTLS(t, dialTimed(t, h.proxy.Listener.Addr().String()), "ups.example.test:443", "ups.example.test")
		idle := h.connectTLS(t, dialTimed(t, h.proxy.Listener.Addr().String()), "ups.example.test:443", "ups.example.test")
		io.WriteString(busy, "POST /up HTTP/1.1\r\nHost: ups.example.test\r\nTransfer-Encoding: chunked\r\n\r\n")
		chunk(busy, "a1\n")
		if line := receive(t, u.lines, "the first line of /up upstream"); line != "/up a1\n" {
			t.Fatalf("upstream got %q", line)
		}
		h.setScopes(cutScopes("/other"))
		h.proxyHandler().recheck(context.Background())
		closedConn(t, busy)
		cutRecord(t, h, "/up", rule.ScopeMiss)
		br := bufio.NewReader(idle)
		for _, tc := range []struct {
			path string
			want int
		}{{"/up", http.StatusForbidden}, {"/other", http.StatusOK}} {
			fmt.Fprintf(idle, "POST %s HTTP/1.1\r\nHost: ups.example.test\r\nContent-Length: 2\r\n\r\nx\n", tc.path)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("POST %s on the idle session after the swap: %v", tc.path, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("POST %s on the idle session after the swap: %d, want %d", tc.path, resp.StatusCode, tc.want)
			}
		}
	})
}

// A tunnel or a switched stream the recheck closes is recorded with why, as a request it cuts
// is: its close record (the stream's record) is a refusal under the rule that refused it now.
func TestRecheckClosesAreRecordedWithWhy(t *testing.T) {
	t.Run("tunnel", func(t *testing.T) {
		h := newHarness(t)
		h.setScopes([]scope.Scope{{Host: "git.example.test", Ports: []int{22}, Tunnel: true}})
		h.pinEcho(t, "git.example.test:22")
		p := h.proxyHandler()
		c := dialTimed(t, h.proxy.Listener.Addr().String())
		io.WriteString(c, "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n\r\n")
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		io.WriteString(c, "x") // echoed: the tunnel is spliced, so held
		if b, err := br.ReadByte(); err != nil || b != 'x' {
			t.Fatalf("the tunnel does not echo: %q %v", b, err)
		}
		h.setScopes([]scope.Scope{{Host: "git.example.test", Ports: []int{22}}}) // no longer a tunnel
		p.recheck(context.Background())
		closedConn(t, br)
		rec, ok := h.sink.await(func(r audit.Record) bool { return r.Event == audit.EventClose })
		if !ok || rec.Decision != audit.Deny || rec.Rule != rule.ScopeMiss || !strings.HasPrefix(rec.Reason, "cut by the recheck: ") {
			t.Fatalf("the tunnel's close record: %+v", rec)
		}
	})
	t.Run("switched stream", func(t *testing.T) {
		h := streamHarness(t)
		c := dialTimed(t, h.proxy.Listener.Addr().String())
		br := upgrade(t, c, "http://ws.example.test/ws", "ws.example.test")
		h.setScopes(streamScopes("/other"))
		h.proxyHandler().recheck(context.Background())
		closed(t, br)
		cutRecord(t, h, "/ws", rule.ScopeMiss)
	})
}
