package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/gateway/broker"
)

// rawUpstream answers each request on each connection it accepts with answer(conn number,
// request number on it, request, conn); answer returns false to stop serving the connection
// (left open until the test ends). accepted counts the connections.
type rawUpstream struct {
	addr     string
	accepted atomic.Int32
}

func newRawUpstream(t *testing.T, answer func(conn, n int, r *http.Request, c net.Conn) bool) *rawUpstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{addr: l.Addr().String()}
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			conn := int(u.accepted.Add(1))
			go func() {
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					r, err := http.ReadRequest(br)
					if err != nil {
						c.Close()
						return
					}
					if !answer(conn, n, r, c) {
						return
					}
				}
			}()
		}
	}()
	return u
}

func testH1(t *http.Transport) *h1Transport {
	if t == nil {
		t = &http.Transport{ResponseHeaderTimeout: time.Minute, IdleConnTimeout: time.Minute, MaxIdleConnsPerHost: 4}
	}
	return &h1Transport{t: t, pool: &h1Pool{}}
}

func h1Get(t *testing.T, rt http.RoundTripper, ctx context.Context, method, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	return rt.RoundTrip(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A connection carries the next request once its answer was read to the end, and says so to the
// trace (the gateway takes the upstream's address from it).
func TestH1Reuse(t *testing.T) {
	u := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
		body := fmt.Sprintf("c%d r%d\n", conn, n)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return true
	})
	h := testH1(nil)
	for i := 1; i <= 3; i++ {
		var got httptrace.GotConnInfo
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { got = ci }})
		resp, err := h1Get(t, h, ctx, "GET", "http://"+u.addr+"/")
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); body != fmt.Sprintf("c1 r%d\n", i) {
			t.Fatalf("request %d: answer %q, want it on the first connection", i, body)
		}
		if got.Conn == nil || got.Conn.RemoteAddr().String() != u.addr || got.Reused != (i > 1) {
			t.Fatalf("request %d: GotConn %+v", i, got)
		}
	}
	if n := u.accepted.Load(); n != 1 {
		t.Fatalf("%d connections for three requests in turn", n)
	}
}

// An answer that ends its connection, or one not read to its end, leaves the connection closed:
// the next request goes on a new one.
func TestH1AnswerEndsConnection(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		read         int // bytes of the body read before Close; -1 for all
	}{
		{"Connection: close", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", -1},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", -1},
		{"body to EOF", "HTTP/1.1 200 OK\r\n\r\nok", -1},
		{"read partly", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", 3},
		{"chunked, read partly", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
				io.WriteString(c, tc.answer)
				if !strings.Contains(tc.answer, "Content-Length") && !strings.Contains(tc.answer, "chunked") {
					c.Close() // the body ends with the connection
					return false
				}
				return true // a second request on this connection would be answered
			})
			h := testH1(nil)
			for i := 0; i < 2; i++ {
				resp, err := h1Get(t, h, context.Background(), "GET", "http://"+u.addr+"/")
				if err != nil {
					t.Fatal(err)
				}
				if tc.read < 0 {
					readAll(t, resp)
				} else {
					if _, err := io.ReadFull(resp.Body, make([]byte, tc.read)); err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
						t.Fatal("a closed body reads on")
					}
				}
			}
			if n := u.accepted.Load(); n != 2 {
				t.Fatalf("%d connections for two requests, want 2", n)
			}
			if h.pool.n != 0 {
				t.Fatalf("%d connections kept idle", h.pool.n)
			}
		})
	}
}

// A cut (the request's context cancelled) mid-answer closes the connection at once: the read
// blocked on the upstream returns, and the upstream sees the connection end.
func TestH1CutMidAnswer(t *testing.T) {
	closed := make(chan struct{})
	u := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npart")
		go func() {
			io.Copy(io.Discard, c) // returns when the gateway closes its end
			close(closed)
		}()
		return false
	})
	h := testH1(nil)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := h1Get(t, h, ctx, "GET", "http://"+u.addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "part" {
		t.Fatalf("first part: %q %v", buf, err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 100))
		read <- err
	}()
	cancel()
	select {
	case err := <-read:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("read after the cut: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for the read blocked on the upstream to return after the cut")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for the upstream to see the connection closed after the cut")
	}
	resp.Body.Close()
	if h.pool.n != 0 {
		t.Fatal("a cut connection was kept")
	}
}

// A cut before the answer's head ends the round trip.
func TestH1CutBeforeHead(t *testing.T) {
	got := make(chan struct{})
	u := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
		close(got)
		return false // never answers
	})
	h := testH1(nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-got
		cancel()
	}()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+u.addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.RoundTrip(req)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round trip cut before the head: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for the round trip to end after the cut")
	}
}

// An idle connection the upstream closed as the request went out (it read the request and
// closed without a byte of answer) is retried once on a new connection for a request that may
// be sent again, and not for one that may not.
func TestH1StaleIdleRetried(t *testing.T) {
	u := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
		if conn == 1 && n == 2 {
			c.Close()
			return false
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nc%d", conn)
		return true
	})
	h := testH1(nil)
	for i, want := range []string{"c1", "c2"} {
		resp, err := h1Get(t, h, context.Background(), "GET", "http://"+u.addr+"/")
		if err != nil {
			t.Fatalf("GET %d: %v", i+1, err)
		}
		if body := readAll(t, resp); body != want {
			t.Fatalf("GET %d: %q, want %q", i+1, body, want)
		}
	}
	if n := u.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}

	// The same with a POST: not sent twice.
	u2 := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
		if conn == 1 && n == 2 {
			c.Close()
			return false
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	resp, err := h1Get(t, h, context.Background(), "POST", "http://"+u2.addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if _, err := h1Get(t, h, context.Background(), "POST", "http://"+u2.addr+"/"); err == nil {
		t.Fatal("a POST whose connection failed was sent again")
	}
	if n := u2.accepted.Load(); n != 1 {
		t.Fatalf("%d connections for the POSTs, want 1", n)
	}
}

// Informational answers go to the trace as they come; the final answer is returned.
func TestH1Informational(t *testing.T) {
	u := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 102 Processing\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	h := testH1(nil)
	var got []string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
			got = append(got, fmt.Sprintf("%d %s", code, header.Get("Link")))
			return nil
		}})
	resp, err := h1Get(t, h, ctx, "GET", "http://"+u.addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("final answer %d %q", resp.StatusCode, body)
	}
	if want := []string{"103 </a.css>; rel=preload", "102 "}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("informational answers %q, want %q", got, want)
	}
	if h.pool.n != 1 {
		t.Fatal("the connection was not kept after the final answer")
	}
}

// Where the client asked for no encoding, gzip is asked for and decoded, as http.Transport
// does; where it asked for one, the answer comes as sent.
func TestH1Gzip(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, "plain text")
	zw.Close()
	u := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			return true
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s", zipped.Len(), zipped.Bytes())
		return true
	})
	h := testH1(nil)
	req, _ := http.NewRequest("GET", "http://"+u.addr+"/", nil)
	resp, err := h.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); body != "plain text" || !resp.Uncompressed || resp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("decoded answer %d %q uncompressed=%v %v", resp.StatusCode, body, resp.Uncompressed, resp.Header)
	}
	if _, ok := req.Header["Accept-Encoding"]; ok {
		t.Fatal("the request's headers kept the added Accept-Encoding")
	}
	req, _ = http.NewRequest("GET", "http://"+u.addr+"/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err = h.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); body != zipped.String() || resp.Uncompressed {
		t.Fatalf("asked-for gzip answer %q uncompressed=%v", body, resp.Uncompressed)
	}
	if n := u.accepted.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// Only the common case takes the fast path; the rest goes to http.Transport.
func TestH1Fits(t *testing.T) {
	tr := &http.Transport{}
	mk := func(method, url string, body io.Reader, h ...string) *http.Request {
		r, err := http.NewRequest(method, url, body)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(h); i += 2 {
			r.Header[h[i]] = []string{h[i+1]}
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want int
	}{
		{"GET", mk("GET", "http://a.test/", nil), 1},
		{"GET asking identity", mk("GET", "http://a.test/", nil, "Accept-Encoding", "identity"), 0},
		{"HEAD", mk("HEAD", "https://a.test/", nil), 0},
		{"range", mk("GET", "http://a.test/", nil, "Range", "bytes=0-1"), 0},
		{"empty Accept-Encoding", mk("GET", "http://a.test/", nil, "Accept-Encoding", ""), -1},
		{"body", mk("POST", "http://a.test/", strings.NewReader("x")), -1},
		{"Expect", mk("GET", "http://a.test/", nil, "Expect", "100-continue"), -1},
		{"upgrade", mk("GET", "http://a.test/", nil, "Connection", "Upgrade", "Upgrade", "websocket"), -1},
		{"bad header value", mk("GET", "http://a.test/", nil, "X-A", "a\r\nb: c"), -1},
		{"bad header name", mk("GET", "http://a.test/", nil, "X A", "a"), -1},
		{"other scheme", mk("GET", "ftp://a.test/", nil), -1},
	} {
		if got := h1Fits(tc.r, tr); got != tc.want {
			t.Errorf("%s: h1Fits %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Two leases' certificates never share a connection: each transport's requests go on its own,
// presenting its own certificate, though both go to one upstream through one pool; and a
// lease's idle connections close when prune lets its transport go.
func TestH1PoolKeyedByCertificate(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.TLS.PeerCertificates[0].Subject.CommonName, r.RemoteAddr)
	}))
	up.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	up.StartTLS()
	defer up.Close()
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	secret := func(cn string) broker.Secret {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		kder, _ := x509.MarshalECPrivateKey(key)
		return broker.Secret{
			"certificate": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
			"serial":      "7", // the same serial: the lease alone tells them apart
		}
	}
	ts := newTransports(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, IdleConnTimeout: time.Minute})
	rts := map[string]*h1Transport{}
	for _, lease := range []string{"l-a", "l-b"} {
		m, err := ts.mtlsOf(ts.h1, lease, secret(lease))
		if err != nil {
			t.Fatal(err)
		}
		if m.fast == nil {
			t.Fatal("an HTTP/1.1 client certificate's transport has no fast path")
		}
		rts[lease] = m.fast
	}
	if m, _ := ts.mtlsOf(ts.base, "l-a", secret("l-a")); m.fast != nil {
		t.Fatal("an HTTP/2 transport took the HTTP/1.1 fast path")
	}
	conns := map[string]string{} // client address -> lease
	for i := 0; i < 3; i++ {
		for _, lease := range []string{"l-a", "l-b"} {
			resp, err := h1Get(t, rts[lease], context.Background(), "GET", up.URL+"/")
			if err != nil {
				t.Fatal(err)
			}
			cn, addr, _ := strings.Cut(readAll(t, resp), " ")
			if cn != lease {
				t.Fatalf("%s's request presented %q's certificate", lease, cn)
			}
			if other, seen := conns[addr]; seen && other != lease {
				t.Fatalf("connection %s carried %s's and %s's requests", addr, other, lease)
			}
			conns[addr] = lease
		}
	}
	if len(conns) != 2 {
		t.Fatalf("%d connections for two leases' requests in turn, want one each", len(conns))
	}
	tb := ts.mtls["l-b\x00"+"7"].t
	ts.prune(func(lease string) bool { return lease == "l-b" })
	ts.pool.mu.Lock()
	defer ts.pool.mu.Unlock()
	for k := range ts.pool.idle {
		if k.t != tb {
			t.Fatal("a let-go lease's idle connection was kept")
		}
	}
	if ts.pool.n != 1 {
		t.Fatalf("%d idle connections after l-a's transport was let go, want l-b's one", ts.pool.n)
	}
}

// The gateway's requests from a sandbox speaking HTTP/1.1 take the fast path: the upstream
// connection waits in the pool and carries the next request, credential injected in both.
func TestForwardTakesH1FastPath(t *testing.T) {
	h := newHarness(t)
	p := h.proxyHandler()
	var mu sync.Mutex
	var from []string
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		from = append(from, r.RemoteAddr)
		mu.Unlock()
		if r.Header.Get("Authorization") == "Bearer "+testSecret {
			io.WriteString(w, "injected")
		}
	})
	c := h.client()
	for i := 0; i < 2; i++ {
		resp, err := c.Get("https://api.example.test/v1/x")
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); body != "injected" {
			t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(from) != 2 || from[0] != from[1] {
		t.Fatalf("the upstream saw the requests from %q, want one connection", from)
	}
	p.transports.pool.mu.Lock()
	defer p.transports.pool.mu.Unlock()
	if p.transports.pool.n != 1 {
		t.Fatalf("%d idle connections in the fast path's pool, want 1", p.transports.pool.n)
	}
}
