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
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

// A held connection (a tunnel, an intercepted session, a switched stream) is held as it was
// opened: the recheck decides it with the function that opened it (allow) and identifies its
// client as a request is identified (whoIs). Each case below tries to keep a connection the
// lease no longer allows, on one path, and asserts the recheck closed it.

// echoUpgrade answers a WebSocket-like upgrade with 101 and then echoes what it is sent.
func echoUpgrade(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "websocket" {
		http.Error(w, "want upgrade", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	io.Copy(conn, brw)
}

// streamHarness is a harness whose ws.example.test:80 (plain) and wss.example.test:443 (TLS)
// answer upgrades with an echo, under scopes that allow /ws on both.
func streamHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	h.pinUpstreams(t, http.HandlerFunc(echoUpgrade), "ws.example.test", "wss.example.test")
	h.setScopes(streamScopes("/ws"))
	return h
}

func streamScopes(path string) []scope.Scope {
	return []scope.Scope{
		{Host: "ws.example.test", Ports: []int{80}, Paths: []string{path}},
		{Host: "wss.example.test", Paths: []string{path}},
	}
}

func (h *harness) setScopes(s []scope.Scope) {
	h.mu.Lock()
	h.scopes = s
	h.mu.Unlock()
}

// dialTimed dials addr with a deadline that bounds the whole case.
func dialTimed(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// connectTLS sends CONNECT target on c and starts TLS with server name sni inside it.
func (h *harness) connectTLS(t *testing.T, c net.Conn, target, sni string, header ...string) *tls.Conn {
	t.Helper()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, strings.Join(header, ""))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: sni, RootCAs: h.ca.Pool(), NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS inside CONNECT %s: %v", target, err)
	}
	return tc
}

// upgrade sends an upgrade request on c and returns the stream once the 101 is in, checked to
// echo.
func upgrade(t *testing.T, c io.ReadWriter, target, host string) *bufio.Reader {
	t.Helper()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", target, host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade %s: %v %v", target, resp, err)
	}
	echoes(t, c, br)
	return br
}

// echoes asserts that the stream on c and br is open.
func echoes(t *testing.T, c io.Writer, br *bufio.Reader) {
	t.Helper()
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("the stream does not echo: %q %v", line, err)
	}
}

// closed asserts that the stream on br ends: read, it gives its end, not the case's deadline.
func closed(t *testing.T, br *bufio.Reader) {
	t.Helper()
	_, err := br.ReadString('\n')
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the stream is still open after the recheck: %v", err)
	}
}

// A switched stream (a WebSocket) is held as its request is decided. It was held by nothing
// before: an intercepted session stops being held once a stream takes its connection over, and
// a plain connection never was; the stream outlived its lease, and a swap that refused its
// request, on every path.
func TestSwitchedStreamHeldAsItsRequest(t *testing.T) {
	// Each opens a stream to /ws on one path a request can take.
	paths := []struct {
		name string
		open func(t *testing.T, h *harness) (io.Writer, *bufio.Reader)
	}{
		{"proxy, absolute form", func(t *testing.T, h *harness) (io.Writer, *bufio.Reader) {
			c := dialTimed(t, h.proxy.Listener.Addr().String())
			return c, upgrade(t, c, "http://ws.example.test/ws", "ws.example.test")
		}},
		{"intercepted CONNECT", func(t *testing.T, h *harness) (io.Writer, *bufio.Reader) {
			tc := h.connectTLS(t, dialTimed(t, h.proxy.Listener.Addr().String()), "wss.example.test:443", "wss.example.test")
			return tc, upgrade(t, tc, "/ws", "wss.example.test")
		}},
		{"redirected TLS", func(t *testing.T, h *harness) (io.Writer, *bufio.Reader) {
			tc, err := h.tlsSession(t, h.redirected(t, "203.0.113.7:443"), "wss.example.test")
			if err != nil {
				t.Fatal(err)
			}
			return tc, upgrade(t, tc, "/ws", "wss.example.test")
		}},
		{"redirected plain HTTP", func(t *testing.T, h *harness) (io.Writer, *bufio.Reader) {
			c := dialTimed(t, h.redirected(t, "198.51.100.9:80"))
			return c, upgrade(t, c, "/ws", "ws.example.test")
		}},
		{"redirected TLS session its lease allowed only later", func(t *testing.T, h *harness) (io.Writer, *bufio.Reader) {
			// Opened while no scope covered the name, the session is held by nothing; the stream
			// opened in it once a swap allowed it must be held all the same.
			h.setScopes([]scope.Scope{{Host: "other.example.test"}})
			tc, err := h.tlsSession(t, h.redirected(t, "203.0.113.7:443"), "wss.example.test")
			if err != nil {
				t.Fatal(err)
			}
			h.setScopes(streamScopes("/ws"))
			return tc, upgrade(t, tc, "/ws", "wss.example.test")
		}},
	}
	// Each takes away what allowed the stream.
	endings := []struct {
		name string
		end  func(h *harness)
	}{
		// The host stays: a session to it is still allowed, a request to /ws no longer is.
		{"a swap drops its path", func(h *harness) { h.setScopes(streamScopes("/other")) }},
		{"its lease ends", func(h *harness) {
			h.mu.Lock()
			h.bindErr = binding.ErrUnknown
			h.mu.Unlock()
		}},
	}
	for _, path := range paths {
		for _, ending := range endings {
			t.Run(path.name+"/"+ending.name, func(t *testing.T) {
				h := streamHarness(t)
				p := h.proxyHandler()
				c, br := path.open(t, h)
				p.recheck(context.Background())
				echoes(t, c, br) // held while allowed
				ending.end(h)
				p.recheck(context.Background())
				closed(t, br)
			})
		}
	}
}

// A client outside the pool is identified by its token only while its address holds no lease:
// with the lease store down, its requests are refused (503), and so are its held connections.
// Before, the recheck fell back to the token on any error of the store, so a token's tunnel or
// session outlived the store's grace while every new connection of the same client was refused.
func TestHeldTokenConnectionsCloseWhenTheStoreIsDown(t *testing.T) {
	for _, kind := range []string{"tunnel", "intercepted session"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t)
			h.bindErr = binding.ErrUnknown // the client's address holds no lease
			h.pinEcho(t, "git.example.test:22")
			p := h.proxyHandler()
			dev, _ := token.NewDevIssuer("dev", "aud")
			v := &token.Verifier{Audience: "aud", Issuers: map[string]token.Issuer{"dev": dev.Issuer(time.Hour)}}
			p.tokens.admit = func(_ context.Context, raw string) (token.Task, error) { return v.VerifyFor(raw, "") }
			raw, _ := dev.Mint("task-t", "", []scope.Scope{{Host: "git.example.test", Ports: []int{22}, Tunnel: true}, {Host: "api.example.test"}}, time.Minute)
			auth := "Proxy-Authorization: Bearer " + raw + "\r\n"

			c := dialTimed(t, h.proxy.Listener.Addr().String())
			var out io.ReadWriter
			if kind == "tunnel" {
				fmt.Fprintf(c, "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n%s\r\n", auth)
				br := bufio.NewReader(c)
				if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("CONNECT: %v %v", resp, err)
				}
				out = &bufferedConn{Conn: c, r: br}
				io.WriteString(out, "x")
				if b := make([]byte, 1); !readFull(out, b) || b[0] != 'x' {
					t.Fatal("the tunnel does not echo")
				}
			} else {
				out = h.connectTLS(t, c, "api.example.test:443", "api.example.test", auth)
			}
			p.recheck(context.Background())
			if kind == "tunnel" {
				io.WriteString(out, "y")
				if b := make([]byte, 1); !readFull(out, b) || b[0] != 'y' {
					t.Fatal("the tunnel was closed while its token allows it")
				}
			}

			h.mu.Lock()
			h.bindErr = fmt.Errorf("%w: the store is down", binding.ErrUnavailable)
			h.mu.Unlock()
			// A new connection with the same token is refused as the store's failure...
			c2 := dialTimed(t, h.proxy.Listener.Addr().String())
			fmt.Fprintf(c2, "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n%s\r\n", auth)
			if resp, err := http.ReadResponse(bufio.NewReader(c2), nil); err != nil || resp.StatusCode != http.StatusServiceUnavailable ||
				rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.StoreDown {
				t.Fatalf("CONNECT with the store down: %v %v", resp, err)
			}
			// ...and the one held is closed, not kept on the token.
			p.recheck(context.Background())
			if n, err := out.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the %s is still open with the store down: read %d, %v", kind, n, err)
			}
		})
	}
}

func readFull(r io.Reader, b []byte) bool {
	_, err := io.ReadFull(r, b)
	return err == nil
}

// Ended cuts at once what the client it names holds and its lease no longer allows, without
// waiting for the tick (a node calls it when it unbinds a lease, before its sandbox goes), and
// leaves every other client's alone.
func TestEndedCutsTheClientAtOnce(t *testing.T) {
	h := streamHarness(t)
	p := h.proxyHandler()
	c := dialTimed(t, h.proxy.Listener.Addr().String())
	br := upgrade(t, c, "http://ws.example.test/ws", "ws.example.test")
	h.mu.Lock()
	h.bindErr = binding.ErrUnknown // its lease is unbound
	h.mu.Unlock()
	p.Ended(context.Background(), netip.MustParseAddr("10.9.9.9"))
	echoes(t, c, br) // another client's end touches nothing of this one
	p.Ended(context.Background(), netip.MustParseAddr("::ffff:127.0.0.1"))
	closed(t, br)
}
