package review

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/slots"
)

// The attacks of these tests: one identity holding the page's calls and connections open by
// every means it has (slow forms, slow reads of pages, kept-alive connections, connections
// that never sign in), against the page as the node serves it (package slots' server on
// loopback). Each asserts the bound holds, says which setting, and that reviewers and other
// tenants are still served.

func withCalls(l slots.Limits) func(*Config) { return func(c *Config) { c.Calls = l } }

// serveBounded serves the page as the node does, on 127.0.0.1 with c and tm, and points the
// fixture's helpers at it; small gives its connections small send buffers, so a page nobody
// reads stops the server's writes at once.
func (f *fixture) serveBounded(c slots.Conns, tm slots.Timeouts, small bool) {
	f.t.Helper()
	var ln net.Listener
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	if small {
		ln = smallBuffers{ln}
	}
	srv := slots.NewServer(ln, slots.ServerConfig{Handler: f.page, Conns: c, Timeouts: tm, Setting: "review", Refuse: f.page.Refuse})
	go srv.Serve()
	f.t.Cleanup(func() { srv.Close() })
	f.url = "http://" + ln.Addr().String()
}

// smallBuffers gives each accepted connection a small send buffer.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// dialer dials from the loopback address from; small gives it a small receive buffer.
func dialer(from string, small bool) *net.Dialer {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	if small {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}
	}
	return d
}

// browserFrom is a browser whose every request comes from the address from, on a connection
// of its own (so it holds none between requests).
func (f *fixture) browserFrom(from string) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second,
		Transport:     &http.Transport{DialContext: dialer(from, false).DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// open sends the head of a request from the address from, as browser c (its cookies), with a
// body of size bytes of which it sends first; small: the connection reads its answer slowly
// (nothing reads it). The connection is closed when the test ends.
func (f *fixture) open(from string, small bool, c *http.Client, method, path string, size int, first string) net.Conn {
	f.t.Helper()
	conn, err := dialer(from, small).Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	head := method + " " + path + " HTTP/1.1\r\nHost: review\r\n"
	if c != nil {
		for _, ck := range c.Jar.Cookies(mustURL(f.url)) {
			head += "Cookie: " + ck.Name + "=" + ck.Value + "\r\n"
		}
	}
	if size > 0 {
		head += fmt.Sprintf("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n", size)
	}
	if _, err := io.WriteString(conn, head+"\r\n"+first); err != nil {
		f.t.Fatal(err)
	}
	return conn
}

// answer reads the answer on conn within 10 s: its status and body.
func (f *fixture) answer(conn net.Conn) (int, string) {
	f.t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		f.t.Fatalf("waiting 10s for an answer on %s: %v", conn.LocalAddr(), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// closed asserts that the server closes conn within 10 s (after whatever it still sends).
func (f *fixture) closed(conn net.Conn, what string) {
	f.t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		f.t.Fatalf("waiting 10s for the server to close %s: %v", what, err)
	}
}

// status is the status of GET path with c.
func (f *fixture) status(c *http.Client, path string) int {
	f.t.Helper()
	resp, _ := f.get(c, path)
	return resp.StatusCode
}

// refusedPage asserts that GET path with c is refused 429 with Retry-After, saying want.
func (f *fixture) refusedPage(c *http.Client, path, want string) {
	f.t.Helper()
	resp, body := f.get(c, path)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, want) {
		f.t.Fatalf("GET %s: %d (Retry-After %q); want 429 saying %q:\n%s", path, resp.StatusCode, resp.Header.Get("Retry-After"), want, body)
	}
}

// A tenant's session whose forms never finish holds two pages at once, however many it starts:
// past review.calls.per_identity its pages are refused, saying so, while a reviewer and
// another tenant are served; the slow forms are cut off after review.timeouts.body, with 408
// naming it, their connections closed, and the tenant is served again.
func TestSlowFormsBoundedPerIdentity(t *testing.T) {
	f := newFixture(t, withCalls(slots.Limits{Max: 8, PerIdentity: 2, Reserved: 2}))
	// The body timeout outlasts the checks below on a loaded machine (2 s did not, under -race).
	f.serveBounded(slots.Conns{Max: 64, PerAddress: 32}, slots.Timeouts{Header: 5 * time.Second, Body: 8 * time.Second, Stall: 10 * time.Second, Idle: 10 * time.Second}, false)
	acme, globex, secops := f.browserFrom("127.0.0.2"), f.browserFrom("127.0.0.3"), f.browserFrom("127.0.0.4")
	f.signIn(acme, keyAcme)
	f.signIn(globex, keyGlobex)
	f.signIn(secops, keyAll)
	var forms []net.Conn
	for range 6 {
		forms = append(forms, f.open("127.0.0.1", false, acme, "POST", "/marks", 1000, "c"))
	}
	// The wait looks at the bound rather than asking for a page: a page asked for would take a
	// slot of the very bound it waits on, and could make one of the forms be refused.
	wait.For(t, 10*time.Second, "acme's slow forms to hold its two call slots", func() bool { return f.page.calls.Held("tenant:acme") == 2 })
	f.refusedPage(acme, "/", "tenant:acme already holds 2 pages and forms in progress on this node, the most one identity may however many times it signs in (review.calls.per_identity)")
	for _, c := range []*http.Client{globex, secops} {
		if st := f.status(c, "/"); st != http.StatusOK {
			t.Fatalf("another identity's page while acme's forms hang: %d", st)
		}
	}
	refused, cut := 0, 0
	for _, conn := range forms {
		switch st, body := f.answer(conn); {
		case st == http.StatusTooManyRequests && strings.Contains(body, "(review.calls.per_identity)"):
			refused++
		case st == http.StatusRequestTimeout && strings.Contains(body, "the request body did not come whole within 8s (review.timeouts.body)"):
			cut++
		default:
			t.Errorf("a slow form: %d %s", st, body)
		}
		f.closed(conn, "a slow form's connection")
	}
	if refused != 4 || cut != 2 {
		t.Errorf("%d slow forms refused and %d cut off after review.timeouts.body; want 4 and the 2 the bound let in", refused, cut)
	}
	if st := f.status(acme, "/"); st != http.StatusOK {
		t.Errorf("acme's page once its slow forms were cut off: %d", st)
	}
}

// A tenant's session that asks for long pages and never reads them holds no more than its two
// call slots: past them it is refused, naming review.calls.per_identity, and a reviewer is
// served; after review.timeouts.stall the unread pages are cut off, their connections closed,
// and the tenant is served again.
func TestSlowReadersBoundedPerIdentity(t *testing.T) {
	f := newFixture(t, withCalls(slots.Limits{Max: 8, PerIdentity: 2, Reserved: 2}))
	for i := range 500 { // a ledger page of 500 records: more than the socket buffers take
		if err := f.sink.Write(context.Background(), audit.Record{Kind: audit.KindHTTP, Decision: audit.Allow, Rule: "scope", Lease: "l-acme",
			Tenant: "acme", Method: "GET", Host: "api.example", Port: 443, Path: fmt.Sprintf("/v1/%s/%d", strings.Repeat("p", 200), i), Status: 200, Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// The stall timeout outlasts the checks below on a loaded machine (2 s did not, under -race).
	f.serveBounded(slots.Conns{Max: 64, PerAddress: 32}, slots.Timeouts{Header: 5 * time.Second, Body: 5 * time.Second, Stall: 8 * time.Second, Idle: 10 * time.Second}, true)
	acme, secops := f.browserFrom("127.0.0.2"), f.browserFrom("127.0.0.3")
	f.signIn(acme, keyAcme)
	f.signIn(secops, keyAll)
	var unread []net.Conn
	for range 2 {
		unread = append(unread, f.open("127.0.0.1", true, acme, "GET", "/leases/l-acme?since=", 0, ""))
	}
	wait.For(t, 10*time.Second, "acme's unread pages to hold its two call slots", func() bool { return f.page.calls.Held("tenant:acme") == 2 })
	f.refusedPage(acme, "/denials", "(review.calls.per_identity)")
	if st := f.status(secops, "/leases/l-acme"); st != http.StatusOK {
		t.Fatalf("a reviewer's page while acme's pages are unread: %d", st)
	}
	// Nothing reads the unread pages until the server has given them all up: a read would let
	// one not yet cut off move again. A page is served once one slot is back, so the wait
	// looks at what the tenant holds.
	wait.For(t, 30*time.Second, "acme's unread pages to be cut off after review.timeouts.stall, giving its slots back", func() bool {
		return f.page.calls.Held("tenant:acme") == 0
	})
	if st := f.status(acme, "/denials"); st != http.StatusOK {
		t.Fatalf("acme's page once its unread pages were cut off: %d", st)
	}
	for _, conn := range unread {
		f.closed(conn, "an unread page's connection, cut off")
	}
}

// Connections that never sign in (a kept-alive one sending nothing more, one whose headers
// never end, a sign-in form that never comes) hold their address's slots only until
// review.timeouts.idle, .header or .body ends them; meanwhile the address is refused, naming
// review.connections.per_address, and a reviewer from another address signs in and follows
// the live tail.
func TestConnectionsBoundedPerAddress(t *testing.T) {
	f := newFixture(t)
	// Long enough for the checks below to see the slots held on a loaded machine.
	f.serveBounded(slots.Conns{Max: 8, PerAddress: 3}, slots.Timeouts{Header: 8 * time.Second, Body: 8 * time.Second, Stall: 10 * time.Second, Idle: 8 * time.Second}, false)
	idle := f.open("127.0.0.1", false, nil, "GET", "/signin", 0, "")
	if st, _ := f.answer(idle); st != http.StatusOK {
		t.Fatalf("the sign-in page: %d", st)
	}
	headers, err := dialer("127.0.0.1", false).Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer headers.Close()
	io.WriteString(headers, "GET /signin HTTP/1.1\r\nHost: review\r\n") // and never the blank line
	form := f.open("127.0.0.1", false, nil, "POST", "/signin", 1000, "csrf=")
	f.refusedPage(f.browserFrom("127.0.0.1"), "/signin", "127.0.0.1 already holds 3 connections to this listener, the most one address may (review.connections.per_address)")
	secops := f.browserFrom("127.0.0.2")
	f.signIn(secops, keyAll)
	f.openTail(secops)
	f.closed(idle, "a kept-alive connection that sent nothing more, after review.timeouts.idle")
	f.closed(headers, "a connection whose headers never ended, after review.timeouts.header")
	if st, body := f.answer(form); st != http.StatusRequestTimeout || !strings.Contains(body, "(review.timeouts.body)") {
		t.Fatalf("a sign-in form that never comes: %d %s; want 408 naming review.timeouts.body", st, body)
	}
	f.closed(form, "a slow sign-in form's connection")
	if st := f.status(f.browserFrom("127.0.0.1"), "/signin"); st != http.StatusOK {
		t.Errorf("the address once its connections were closed: %d", st)
	}
}
