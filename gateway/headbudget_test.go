package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/receipt"
	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// connectHead is what harness.intercept sends to open a session to api.example.test.
const connectHead = "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n"

// filler is a header of n bytes of data, as a sandbox would carry it out.
func filler(n int) string { return "X-Data: " + strings.Repeat("d", n) + "\r\n" }

// headBudget is a harness whose lease (l-1) has a byte budget of limit and whose TLS upstream
// reads every body and answers "ok"; h.received() lists what each upstream received.
func headBudget(t *testing.T, limit int64) *harness {
	t.Helper()
	h := newHarness(t)
	p := h.proxyHandler()
	p.Reload(p.dyn.Load().catalog, p.dyn.Load().pins, nil, budget.Budget{BytesUp: limit})
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	return h
}

// spent is what lease l-1 has used of its byte budget.
func (h *harness) spent() int64 {
	u, ok := h.proxyHandler().budgets.m.Load("l-1")
	if !ok {
		return 0
	}
	return u.(*usage).bytesUp.Load()
}

// httpRecords are the HTTP records written so far.
func (h *harness) httpRecords() []audit.Record {
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	var out []audit.Record
	for _, r := range h.sink.recs {
		if r.Kind == audit.KindHTTP {
			out = append(out, r)
		}
	}
	return out
}

// dialedAny reports whether the gateway dialed any upstream.
func (h *harness) dialedAny() bool {
	h.dialer.mu.Lock()
	defer h.dialer.mu.Unlock()
	return len(h.dialer.dialed) > 0
}

// roundTrip sends raw on c and reads the answer to it.
func roundTrip(t *testing.T, c net.Conn, raw string) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %.60q: %v", raw, err)
	}
	if strings.HasPrefix(raw, "CONNECT ") && resp.StatusCode == 200 {
		return resp // the tunnel's bytes follow, not a body
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// dialRaw opens a connection to addr that the test closes.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// toProxy sends raw to the gateway on a connection of its own.
func toProxy(t *testing.T, h *harness, raw string) *http.Response {
	t.Helper()
	return roundTrip(t, dialRaw(t, h.proxy.Listener.Addr().String()), raw)
}

// refusedForBudget checks that resp is the budget's refusal and that nothing went upstream.
func refusedForBudget(t *testing.T, h *harness, resp *http.Response, limit int64) {
	t.Helper()
	if resp.StatusCode != http.StatusTooManyRequests || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.Budget {
		t.Fatalf("status %d rule %q reason %q, want 429 by the budget", resp.StatusCode,
			resp.Header.Get("X-Airlock-Rule"), resp.Header.Get("X-Airlock-Reason"))
	}
	if got := h.received(); len(got) > 0 {
		t.Fatalf("the upstream received %v", got)
	}
	if s := h.spent(); s > limit {
		t.Fatalf("the lease spent %d bytes of a budget of %d", s, limit)
	}
	if rec, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == rule.Budget }); !ok || rec.BytesUp != 0 || rec.Status != 429 {
		t.Fatalf("record of the refusal %+v, want one by the budget with nothing up", rec)
	}
}

// Everything of a request head is the sandbox's to choose, and each way it could carry data
// past the byte budget is refused before anything is sent: 429 by the budget, the upstream
// never reached.
func TestHeadOverBudgetRefused(t *testing.T) {
	const limit = 1000
	big := filler(1500)
	tests := []struct {
		name   string
		scopes []scope.Scope
		send   func(t *testing.T, h *harness) *http.Response
	}{
		{name: "a header", send: func(t *testing.T, h *harness) *http.Response {
			return toProxy(t, h, "GET http://plain.example.test/v1/x HTTP/1.1\r\nHost: plain.example.test\r\n"+big+"\r\n")
		}},
		{name: "the query", send: func(t *testing.T, h *harness) *http.Response {
			return toProxy(t, h, "GET http://plain.example.test/v1/x?q="+strings.Repeat("q", 1500)+" HTTP/1.1\r\nHost: plain.example.test\r\n\r\n")
		}},
		{name: "a header repeated", send: func(t *testing.T, h *harness) *http.Response {
			return toProxy(t, h, "GET http://plain.example.test/v1/x HTTP/1.1\r\nHost: plain.example.test\r\n"+
				strings.Repeat("X-A: 0123456789\r\n", 100)+"\r\n")
		}},
		{name: "the trailer names a chunked body announces", send: func(t *testing.T, h *harness) *http.Response {
			names := make([]string, 150)
			for i := range names {
				names[i] = fmt.Sprintf("X-T%04d", i)
			}
			return toProxy(t, h, "POST http://plain.example.test/v1/x HTTP/1.1\r\nHost: plain.example.test\r\n"+
				"Transfer-Encoding: chunked\r\nTrailer: "+strings.Join(names, ", ")+"\r\n\r\n0\r\n\r\n")
		}},
		{name: "a request inside an intercepted CONNECT", send: func(t *testing.T, h *harness) *http.Response {
			return roundTrip(t, h.intercept(t, "api.example.test:443"), "GET /v1/x HTTP/1.1\r\nHost: api.example.test\r\n"+big+"\r\n")
		}},
		{name: "the CONNECT line and its headers", send: func(t *testing.T, h *harness) *http.Response {
			resp := toProxy(t, h, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n"+big+"\r\n")
			if h.dialedAny() {
				t.Error("the gateway dialed upstream for a CONNECT over the budget")
			}
			return resp
		}},
		{name: "a tunnel's CONNECT", scopes: []scope.Scope{{Host: "git.example.test", Ports: []int{22}, Tunnel: true}},
			send: func(t *testing.T, h *harness) *http.Response {
				resp := toProxy(t, h, "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n"+big+"\r\n")
				if h.dialedAny() {
					t.Error("the gateway dialed the tunnel's upstream for a CONNECT over the budget")
				}
				return resp
			}},
		{name: "a redirected plain HTTP request", send: func(t *testing.T, h *harness) *http.Response {
			return roundTrip(t, dialRaw(t, h.redirected(t, "203.0.113.7:80")), "GET /v1/x HTTP/1.1\r\nHost: plain.example.test\r\n"+big+"\r\n")
		}},
		{name: "a WebSocket upgrade", scopes: []scope.Scope{{Host: "api.example.test"}}, send: func(t *testing.T, h *harness) *http.Response {
			return roundTrip(t, h.intercept(t, "api.example.test:443"),
				"GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+big+"\r\n")
		}},
		{name: "an MCP call, read and put back", scopes: []scope.Scope{{Host: "api.example.test", MCP: &scope.MCP{Tools: []string{"a"}}}},
			send: func(t *testing.T, h *harness) *http.Response {
				body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
				return roundTrip(t, h.intercept(t, "api.example.test:443"), "POST /mcp HTTP/1.1\r\nHost: api.example.test\r\n"+
					"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n"+big+"\r\n"+body)
			}},
		{name: "a git fetch", scopes: []scope.Scope{{Host: "api.example.test", Git: &scope.Git{Repos: []string{"acme/app"}}}},
			send: func(t *testing.T, h *harness) *http.Response {
				return roundTrip(t, h.intercept(t, "api.example.test:443"),
					"GET /acme/app.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: api.example.test\r\n"+big+"\r\n")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := headBudget(t, limit)
			if tt.scopes != nil {
				h.scopes = tt.scopes
			}
			refusedForBudget(t, h, tt.send(t, h), limit)
		})
	}
}

// A head larger than what is left is refused with the numbers: what is left, of what budget,
// and the head's size, which is the bytes the sandbox sent.
func TestHeadRefusalNamesTheNumbers(t *testing.T) {
	first := "GET http://plain.example.test/v1/a HTTP/1.1\r\nHost: plain.example.test\r\n\r\n"
	second := "GET http://plain.example.test/v1/b HTTP/1.1\r\nHost: plain.example.test\r\n" + filler(200) + "\r\n"
	limit := int64(len(first) + 100)
	h := headBudget(t, limit)
	if resp := toProxy(t, h, first); resp.StatusCode != 200 {
		t.Fatalf("a head within the budget: status %d %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
	}
	resp := toProxy(t, h, second)
	want := fmt.Sprintf("lease l-1 has 100 of its %d bytes upstream left, and this request's head is %d", limit, len(second))
	if resp.StatusCode != 429 || !strings.Contains(resp.Header.Get("X-Airlock-Reason"), want) {
		t.Fatalf("status %d reason %q, want 429 saying %q", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), want)
	}
	if got := h.received(); len(got) != 1 || got[0] != "/v1/a" {
		t.Fatalf("the upstream received %v, want only /v1/a", got)
	}
	if s := h.spent(); s != int64(len(first)) {
		t.Fatalf("the lease spent %d, want the first head's %d", s, len(first))
	}
}

// HTTP/2 compresses headers (HPACK): a header sent again is an index of a byte or two on the
// wire. The budget counts the head as decoded, so the second request, its 1500-byte header
// indexed, costs what the first did and is refused.
func TestHTTP2HeadCountedDecoded(t *testing.T) {
	h := headBudget(t, 2500)
	pu, _ := url.Parse(h.proxy.URL)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool()}, ForceAttemptHTTP2: true,
	}}
	send := func() *http.Response {
		req, _ := http.NewRequest("GET", "https://api.example.test/v1/x", nil)
		req.Header.Set("X-Data", strings.Repeat("d", 1500))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("the client spoke %s, not HTTP/2", resp.Proto)
		}
		return resp
	}
	if resp := send(); resp.StatusCode != 200 {
		t.Fatalf("the first request: status %d %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
	}
	resp := send()
	if resp.StatusCode != 429 || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.Budget {
		t.Fatalf("the second request, its header indexed: status %d rule %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
	}
	if got := h.received(); len(got) != 1 {
		t.Fatalf("the upstream received %v, want the first request only", got)
	}
}

// The server name of a redirected TLS connection is the sandbox's to choose: it costs what the
// CONNECT it stands for would, and a connection whose name does not fit is closed unserved.
func TestRedirectedServerNameCharged(t *testing.T) {
	const name = "api.example.test"
	stand := int64(len("CONNECT " + name + ":443 HTTP/1.1\r\nHost: " + name + ":443\r\n\r\n"))
	h := headBudget(t, stand-1)
	addr := h.redirected(t, "203.0.113.7:443")
	if _, err := h.tlsSession(t, addr, name); err == nil {
		t.Fatal("a TLS session whose server name is over the budget was served")
	}
	rec, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == rule.Budget })
	if !ok || rec.Host != name || rec.Dest != "203.0.113.7:443" || !strings.Contains(rec.Reason, fmt.Sprintf("head is %d", stand)) {
		t.Fatalf("record of the refused connection %+v", rec)
	}
	if h.dialedAny() || len(h.received()) > 0 {
		t.Fatal("a connection refused for its server name reached upstream")
	}
}

// Trailers on a chunked request body are the sandbox's too: charged when the body ends, and a
// body whose trailers go over the budget is cut there, the upstream never getting it whole.
func TestTrailersOverBudgetCut(t *testing.T) {
	const limit = 1000
	h := headBudget(t, limit)
	var whole atomic.Int64
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil {
			whole.Add(1)
		}
		io.WriteString(w, "ok")
	})
	resp := roundTrip(t, h.intercept(t, "api.example.test:443"), "POST /v1/x HTTP/1.1\r\nHost: api.example.test\r\n"+
		"Transfer-Encoding: chunked\r\nTrailer: X-Data\r\n\r\n3\r\nabc\r\n0\r\n"+filler(1500)+"\r\n")
	if resp.StatusCode != http.StatusTooManyRequests || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.Budget {
		t.Fatalf("status %d rule %q, want 429 by the budget", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
	}
	if n := whole.Load(); n != 0 {
		t.Fatal("the upstream read the whole body of a request whose trailers went over the budget")
	}
	rec, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == rule.Budget })
	if !ok || rec.BytesUp > limit || rec.BytesUp != h.spent() {
		t.Fatalf("record %+v; the lease spent %d", rec, h.spent())
	}
}

// A request refused after its head was reserved, before anything was sent (an approval
// pending, a name resolving only to private addresses), gives the head back: nothing went
// upstream, and its record says so. A request that waits for approval then retries would
// otherwise pay for every retry.
func TestRefusedBeforeSendingCostsNothing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *harness)
		url   string
		rule  rule.Rule
	}{
		{name: "approval pending", url: "http://plain.example.test/v1/x", rule: rule.ApprovalPending, setup: func(h *harness) {
			h.scopes = []scope.Scope{{Host: "plain.example.test", Approval: scope.Approval{On: true, Methods: []string{"GET"}}}}
			h.proxyHandler().cfg.Approvals = approval.New(approval.Config{Hold: 10 * time.Millisecond, Audit: h.sink, Node: "n"})
		}},
		{name: "private address", url: "http://private.example.test/", rule: rule.PrivateAddress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := headBudget(t, 1<<20)
			if tt.setup != nil {
				tt.setup(h)
			}
			resp, err := h.client().Get(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if rule.Rule(resp.Header.Get("X-Airlock-Rule")) != tt.rule {
				t.Fatalf("status %d rule %q, want %s", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), tt.rule)
			}
			wait.For(t, 5*time.Second, "the refused request's head to go back to the budget", func() bool { return h.spent() == 0 })
			if rec, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == tt.rule && r.Kind == audit.KindHTTP }); !ok || rec.BytesUp != 0 {
				t.Fatalf("record %+v, want nothing up", rec)
			}
		})
	}
}

// Requests of one lease racing each other share one budget: heads are reserved whole and
// atomically, so exactly as many pass as fit, and the upstream receives those only.
func TestConcurrentHeadsShareOneBudget(t *testing.T) {
	raw := "GET http://plain.example.test/v1/x HTTP/1.1\r\nHost: plain.example.test\r\n" + filler(300) + "\r\n"
	size := int64(len(raw))
	const fit, racers = 5, 16
	limit := fit*size + size/2
	h := headBudget(t, limit)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, raw)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 429:
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != fit || refused.Load() != racers-fit {
		t.Fatalf("%d passed and %d were refused, want %d and %d", ok.Load(), refused.Load(), fit, racers-fit)
	}
	if got := len(h.received()); got != fit {
		t.Fatalf("the upstream received %d requests, want %d", got, fit)
	}
	wait.For(t, 5*time.Second, "every racer's record", func() bool { return len(h.httpRecords()) == racers })
	if s := h.spent(); s != fit*size {
		t.Fatalf("the lease spent %d, want %d heads of %d", s, fit, size)
	}
}

// The records count the bytes the budget does: a lease that sent only GETs (plain, intercepted
// in HTTP/1.1 and HTTP/2) and a tunnel has its heads in its records' bytes up, their sum is what
// the budget holds, and the receipt built from them says the same. A head sent in its plain form
// is recorded as exactly its bytes.
func TestRecordsCountWhatTheBudgetCounts(t *testing.T) {
	h := headBudget(t, 1<<30)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	h.scopes = append(h.scopes, scope.Scope{Host: "git.example.test", Ports: []int{22}, Tunnel: true})
	h.proxyHandler().dyn.Load().pins["git.example.test:22"] = netip.MustParseAddrPort(tl.Addr().String())
	h.dialer.mu.Lock()
	h.dialer.allowed[tl.Addr().String()] = true
	h.dialer.mu.Unlock()

	plain := "GET http://plain.example.test/v1/x?page=2 HTTP/1.1\r\nHost: plain.example.test\r\nAccept: */*\r\n\r\n"
	if resp := toProxy(t, h, plain); resp.StatusCode != 200 {
		t.Fatalf("plain GET: %d", resp.StatusCode)
	}
	if rec := h.sink.last(); rec.BytesUp != int64(len(plain)) {
		t.Fatalf("the plain GET's record has %d bytes up, want its head's %d", rec.BytesUp, len(plain))
	}
	tc := h.intercept(t, "api.example.test:443")
	inner := "GET /v1/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n"
	for i, want := range []int{len(connectHead) + len(inner), len(inner)} {
		if resp := roundTrip(t, tc, inner); resp.StatusCode != 200 {
			t.Fatalf("intercepted GET %d: %d", i, resp.StatusCode)
		}
		if rec := h.sink.last(); rec.BytesUp != int64(want) {
			t.Fatalf("intercepted GET %d recorded %d bytes up, want %d (the session's CONNECT goes with its first request)", i, rec.BytesUp, want)
		}
	}
	pu, _ := url.Parse(h.proxy.URL)
	c2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool()}, ForceAttemptHTTP2: true,
	}}
	resp, err := c2.Get("https://api.example.test/v1/x")
	if err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("HTTP/2 GET: %v %v", resp, err)
	}
	resp.Body.Close()
	c2.CloseIdleConnections()
	tun := dialRaw(t, h.proxy.Listener.Addr().String())
	if resp := roundTrip(t, tun, "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("tunnel: %d", resp.StatusCode)
	}
	io.WriteString(tun, "hello")
	tun.Close()
	wait.For(t, 5*time.Second, "the tunnel's close record", func() bool {
		_, ok := h.sink.await(func(r audit.Record) bool { return r.Event == "close" })
		return ok
	})
	wait.For(t, 5*time.Second, "the records to hold every byte the budget does", func() bool {
		var sum int64
		for _, r := range h.httpRecords() {
			sum += r.BytesUp
		}
		return sum == h.spent()
	})
	b := receipt.NewBuilder()
	for _, r := range h.httpRecords() {
		b.Add(r)
	}
	var total int64
	for _, d := range b.Receipt().Destinations {
		if d.BytesUp == 0 {
			t.Errorf("the receipt shows nothing up for %s:%d, which was sent only GETs", d.Host, d.Port)
		}
		total += d.BytesUp
	}
	if total != h.spent() || total == 0 {
		t.Fatalf("the receipt shows %d bytes up, the budget %d", total, h.spent())
	}
}

// headSize is what a request's head is on the wire in HTTP/1.1, counted from what the server
// read: values without the whitespace around them.
func TestHeadSize(t *testing.T) {
	tests := []struct {
		name, raw string
		want      int // 0: len(raw)
	}{
		{name: "origin form with a query", raw: "GET /v1/x?a=1&b=2 HTTP/1.1\r\nHost: api.example.test\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n"},
		{name: "absolute form", raw: "GET http://plain.example.test/v1/x?q=abc HTTP/1.1\r\nHost: plain.example.test\r\n\r\n"},
		{name: "repeated header", raw: "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-A: 22\r\nX-A: 333\r\n\r\n"},
		{name: "lower-case names", raw: "GET / HTTP/1.1\r\nhost: a\r\nx-data: v\r\n\r\n"},
		{name: "HTTP/1.0", raw: "GET / HTTP/1.0\r\nHost: a\r\n\r\n"},
		{name: "chunked, trailers announced", raw: "POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-One, X-Two\r\n\r\n"},
		{name: "CONNECT", raw: connectHead},
		{name: "whitespace around a value", raw: "GET / HTTP/1.1\r\nHost: a\r\nX-A:  \t padded \t \r\n\r\n",
			want: len("GET / HTTP/1.1\r\nHost: a\r\nX-A: padded\r\n\r\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tt.raw + "0\r\n\r\n")))
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == 0 {
				want = len(tt.raw)
			}
			if got := headSize(r); got != int64(want) {
				t.Fatalf("headSize %d, want %d", got, want)
			}
			if n := testing.AllocsPerRun(100, func() { headSize(r) }); n != 0 {
				t.Fatalf("headSize allocates %.0f times", n)
			}
		})
	}
}

// The same request costs the same in HTTP/1.1 and in HTTP/2, its fields decoded.
func TestHeadSizeSameInHTTP2(t *testing.T) {
	sizes := func(http2 bool) string {
		t.Helper()
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %d", r.Proto, headSize(r))
		}))
		srv.EnableHTTP2 = http2
		srv.StartTLS()
		t.Cleanup(srv.Close)
		req, _ := http.NewRequest("GET", srv.URL+"/v1/x?q="+strings.Repeat("q", 100), nil)
		req.Header["X-A"] = []string{"one", "two"}
		req.Header.Set("X-Data", strings.Repeat("d", 500))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	h1, h2 := sizes(false), sizes(true)
	p1, n1, _ := strings.Cut(h1, " ")
	p2, n2, _ := strings.Cut(h2, " ")
	if p1 != "HTTP/1.1" || p2 != "HTTP/2.0" || n1 != n2 {
		t.Fatalf("HTTP/1.1 head %q, HTTP/2 head %q: want the same size", h1, h2)
	}
}
