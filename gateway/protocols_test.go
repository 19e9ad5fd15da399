package gateway

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/scope"
)

// newProtoHarness points api.example.test at handler, served over TLS with HTTP/2 enabled.
func newProtoHarness(t testing.TB, handler http.Handler) *harness {
	t.Helper()
	h := newHarness(t)
	leaf, _ := h.ca.Leaf("api.example.test")
	up := httptest.NewUnstartedServer(handler)
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	up.StartTLS()
	t.Cleanup(up.Close)
	addr := up.Listener.Addr().String()
	h.dialer.mu.Lock()
	h.dialer.allowed[addr] = true
	h.dialer.mu.Unlock()
	h.proxyHandler().dyn.Load().pins["api.example.test:443"] = netip.MustParseAddrPort(addr)
	h.scopes = []scope.Scope{{Host: "api.example.test"}}
	return h
}

func (h *harness) proxyHandler() *Proxy { return h.proxy.Config.Handler.(*Proxy) }

func TestHTTP2BothWays(t *testing.T) {
	h := newProtoHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream-proto=%s", r.Proto)
	}))
	pu, _ := url.Parse(h.proxy.URL)
	c := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool()}, ForceAttemptHTTP2: true,
	}}
	for i := range 3 { // kept-alive: later requests reuse the intercepted connection
		resp, err := c.Get("https://api.example.test/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || string(b) != "upstream-proto=HTTP/2.0" {
			t.Fatalf("request %d: sandbox side %s, %q", i, resp.Proto, b)
		}
	}
}

// TestHTTP1StaysHTTP1 sends HTTP/1.1 requests, interleaved with HTTP/2 ones on another client,
// to an upstream that offers HTTP/2: each goes upstream in the protocol its client spoke, on
// connections that are never shared between the two.
func TestHTTP1StaysHTTP1(t *testing.T) {
	h := newProtoHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream-proto=%s", r.Proto)
	}))
	pu, _ := url.Parse(h.proxy.URL)
	h1 := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool()}}}
	h2 := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool()}, ForceAttemptHTTP2: true}}
	for i := range 4 {
		c, want := h1, "HTTP/1.1"
		if i%2 == 1 {
			c, want = h2, "HTTP/2.0"
		}
		resp, err := c.Get("https://api.example.test/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "upstream-proto="+want || resp.Proto != want {
			t.Fatalf("request %d: the sandbox spoke %s, the upstream heard %q", i, resp.Proto, b)
		}
	}
}

func TestLargeStreamedBodies(t *testing.T) {
	const size = 32 << 20
	h := newProtoHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.New()
		n, _ := io.Copy(sum, r.Body)
		w.Header().Set("X-Upload", fmt.Sprintf("%d:%x", n, sum.Sum(nil)))
		// A chunked download of the same size.
		buf := make([]byte, 64<<10)
		for sent := 0; sent < size; sent += len(buf) {
			w.Write(buf)
		}
	}))
	body := strings.NewReader(strings.Repeat("a", size))
	want := sha256.Sum256([]byte(strings.Repeat("a", size)))
	req, _ := http.NewRequest("POST", "https://api.example.test/upload", io.NopCloser(body))
	req.ContentLength = -1 // chunked upload
	resp, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("X-Upload"); got != fmt.Sprintf("%d:%x", size, want) {
		t.Fatalf("upstream received %s", got)
	}
	if n != size {
		t.Fatalf("downloaded %d bytes", n)
	}
	// Up: the body, and the heads of the request and the CONNECT its session opened with.
	rec := h.sink.last()
	if rec.BytesUp <= size || rec.BytesUp > size+1024 || rec.BytesDown != size {
		t.Fatalf("audit bytes up %d down %d", rec.BytesUp, rec.BytesDown)
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	h := newProtoHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		// Echo one line, as a stand-in for frames.
		line, _ := brw.ReadString('\n')
		conn.Write([]byte("echo:" + line))
	}))
	c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "api.example.test", RootCAs: h.ca.Pool(), NextProtos: []string{"http/1.1"}})
	fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	tbr := bufio.NewReader(tc)
	resp, err := http.ReadResponse(tbr, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	fmt.Fprintf(tc, "hello\n")
	line, err := tbr.ReadString('\n')
	if err != nil || line != "echo:hello\n" {
		t.Fatalf("echo %q %v", line, err)
	}
}

// TestSandboxKeyExchange: a sandbox's intercepted TLS agrees X25519 even when its client puts
// the hybrid post-quantum exchange first (it is the costly half of a new connection, on a hop
// that stays on the node), and a client outside the pool keeps Go's defaults.
func TestSandboxKeyExchange(t *testing.T) {
	h := newProtoHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	pu, _ := url.Parse(h.proxy.URL)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{
		RootCAs: h.ca.Pool(), CurvePreferences: []tls.CurveID{tls.X25519MLKEM768, tls.X25519},
	}}}
	resp, err := c.Get("https://api.example.test/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.CurveID != tls.X25519 {
		t.Fatalf("the sandbox's TLS agreed %v, want X25519", resp.TLS.CurveID)
	}
	if got := curvesFor(&exchange{bearer: "a-task-token"}); got != nil {
		t.Fatalf("a client outside the pool is offered %v, want Go's defaults", got)
	}
}
