package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// budgetHarness is a harness whose lease has a byte budget of limit and whose TLS upstream
// counts the body bytes it receives.
func budgetHarness(t *testing.T, limit int64) (*harness, *atomic.Int64) {
	t.Helper()
	h := newHarness(t)
	p := h.proxyHandler()
	p.Reload(p.dyn.Load().catalog, p.dyn.Load().pins, nil, budget.Budget{BytesUp: limit})
	var received atomic.Int64
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
		io.WriteString(w, "ok")
	})
	return h, &received
}

// chunked is a body of n bytes of unknown length (sent chunked).
type chunked struct{ n int }

func (c *chunked) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, 700)
	for i := range k {
		p[i] = 'x'
	}
	c.n -= k
	return k, nil
}

// Budgets are enforced before bytes leave: an announced body over what is left is refused before
// anything is sent, a streamed body is cut at the budget, and the upstream never receives a byte
// over it.
func TestBudgetEnforcedBeforeBytesLeave(t *testing.T) {
	t.Run("announced body over the budget", func(t *testing.T) {
		h, received := budgetHarness(t, 1000)
		resp, err := h.client().Post("https://api.example.test/v1/x", "text/plain", strings.NewReader(strings.Repeat("x", 1500)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.Budget {
			t.Fatalf("status %d rule %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
		}
		if len(h.received()) > 0 || received.Load() > 0 || h.asked.Load() > 0 {
			t.Fatalf("refused body reached the upstream (%v, %d bytes) or the broker", h.received(), received.Load())
		}
	})
	t.Run("streamed body over the budget", func(t *testing.T) {
		for range 10 { // the bug this replaces lost about half of such races
			h, received := budgetHarness(t, 1000)
			req, _ := http.NewRequest("POST", "https://api.example.test/v1/x", &chunked{n: 5000})
			resp, err := h.client().Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					t.Fatal("a streamed body over the budget was answered 200")
				}
			}
			if got := received.Load(); got > 1000 {
				t.Fatalf("the upstream received %d bytes of a 1000-byte budget", got)
			}
			if rec, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == rule.Budget }); !ok || rec.BytesUp > 1000 {
				t.Fatalf("no budget refusal recorded within the budget: %+v", rec)
			}
		}
	})
	t.Run("concurrent bodies share one budget", func(t *testing.T) {
		h, received := budgetHarness(t, 10000)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", "https://api.example.test/v1/x", &chunked{n: 3000})
				if resp, err := h.client().Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		if got := received.Load(); got > 10000 {
			t.Fatalf("16 concurrent uploads delivered %d bytes on a 10000-byte budget", got)
		}
	})
}

// Tunnels follow the rules requests do: refused while the trail refuses records, recorded when
// they open (before any byte passes) and when they close, and cut at the byte budget.
func TestTunnelFollowsRequestRules(t *testing.T) {
	var got atomic.Int64
	closed := make(chan struct{}, 8) // one per upstream connection that ended
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
				n, _ := io.Copy(io.Discard, c)
				got.Add(n)
				closed <- struct{}{}
			}()
		}
	}()
	const tunnelConnect = "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n\r\n"
	setup := func(t *testing.T, limit int64) *harness {
		h := newHarness(t)
		h.scopes = []scope.Scope{{Host: "git.example.test", Ports: []int{22}, Tunnel: true}}
		p := h.proxyHandler()
		pins := map[string]netip.AddrPort{"git.example.test:22": netip.MustParseAddrPort(l.Addr().String())}
		p.Reload(p.dyn.Load().catalog, pins, nil, budget.Budget{BytesUp: limit})
		h.dialer.allowed[l.Addr().String()] = true
		return h
	}
	connect := func(t *testing.T, h *harness) (*http.Response, net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, tunnelConnect)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, c, br
	}
	t.Run("audit down refuses the tunnel", func(t *testing.T) {
		h := setup(t, 0)
		h.sink.err = fmt.Errorf("%w: disk full", audit.ErrUnavailable)
		if resp, _, _ := connect(t, h); resp.StatusCode != http.StatusServiceUnavailable || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.AuditDown {
			t.Fatalf("tunnel with the trail down: %d %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
		}
	})
	t.Run("recorded at open and at close", func(t *testing.T) {
		h := setup(t, 0)
		resp, c, br := connect(t, h)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		br.ReadString('\n')
		// Open and still open: its record is already written.
		open, ok := h.sink.await(func(r audit.Record) bool { return r.Event == "open" && r.Host == "git.example.test" })
		if !ok || open.Decision != audit.Allow || open.Upstream == "" {
			t.Fatalf("no record of the open tunnel: %+v", open)
		}
		io.WriteString(c, "hello")
		c.Close()
		// The tunnel's bytes are on its close: the CONNECT's head, then what went through.
		rec, ok := h.sink.await(func(r audit.Record) bool { return r.Event == "close" })
		if want := int64(len(tunnelConnect) + len("hello")); !ok || rec.BytesUp != want || open.BytesUp != 0 {
			t.Fatalf("close record %+v, want %d bytes up (and none on the open record, %d)", rec, want, open.BytesUp)
		}
	})
	t.Run("cut at the byte budget", func(t *testing.T) {
		h := setup(t, 1000)
		for len(closed) > 0 {
			<-closed
		}
		got.Store(0)
		resp, c, br := connect(t, h)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		br.ReadString('\n')
		for range 10 {
			if _, err := c.Write([]byte(strings.Repeat("y", 500))); err != nil {
				break
			}
		}
		rec, ok := h.sink.await(func(r audit.Record) bool { return r.Event == "close" })
		if !ok || rec.Rule != rule.Budget || rec.Decision != audit.Deny || rec.BytesUp > 1000 {
			t.Fatalf("close record of a tunnel over its budget: %+v", rec)
		}
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the upstream connection was not closed within 5s of the budget running out")
		}
		if n := got.Load(); n > 1000 {
			t.Fatalf("the upstream received %d bytes through a tunnel with a 1000-byte budget", n)
		}
	})
}

// What the sandbox sends on an upgraded stream counts against its byte budget.
func TestUpgradedStreamMetered(t *testing.T) {
	h := newHarness(t)
	h.scopes = append([]scope.Scope{{Host: "api.example.test", Paths: []string{"/ws"}}}, h.scopes...)
	p := h.proxyHandler()
	p.Reload(p.dyn.Load().catalog, p.dyn.Load().pins, nil, budget.Budget{BytesUp: 1000})
	var got atomic.Int64
	done := make(chan struct{})
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		n, _ := io.Copy(io.Discard, brw)
		got.Store(n)
		close(done)
	})
	tc := h.intercept(t, "api.example.test:443")
	br := bufio.NewReader(tc)
	io.WriteString(tc, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for range 10 {
		if _, err := tc.Write([]byte(strings.Repeat("z", 500))); err != nil {
			break
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the upgraded stream was not cut within 5s of the budget running out")
	}
	if n := got.Load(); n > 1000 {
		t.Fatalf("the upstream received %d bytes on an upgraded stream with a 1000-byte budget", n)
	}
	if rec, ok := h.sink.await(func(r audit.Record) bool { return r.Path == "/ws" }); !ok || rec.BytesUp > 1000 || rec.BytesUp < 500 {
		t.Fatalf("record of the upgraded stream: %+v", rec)
	}
}
