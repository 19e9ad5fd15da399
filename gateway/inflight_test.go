package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/scope"
)

// Review finding (not a regression of #32): the recheck holds tunnels, intercepted sessions and
// switched streams, but not an ordinary request still in flight. A request whose body is still
// streaming up (or whose answer is still streaming down) keeps passing after a token swap has
// refused it, or after its lease ended, on every path where nothing else holds its connection:
// the proxied absolute form and the redirected plain HTTP path; and, on an intercepted session
// whose host stays allowed, after a swap that drops the request's path (the session is held
// per host:port only). The sandbox goes on sending bytes to a destination its scopes no longer
// allow: "narrowing a running lease takes effect at once" does not hold for them.

// inflightHarness is a harness whose up.example.test:80 (plain) and ups.example.test:443 (TLS)
// read a request body line by line, reporting each line on the returned channel, under scopes
// that allow /up on both.
func inflightHarness(t *testing.T) (*harness, <-chan string) {
	t.Helper()
	h := newHarness(t)
	got := make(chan string, 64)
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				got <- line
			}
			if err != nil {
				break
			}
		}
		io.WriteString(w, "done\n")
	})
	h.pinUpstreams(t, read, "up.example.test", "ups.example.test")
	h.setScopes(inflightScopes("/up"))
	return h, got
}

func inflightScopes(path string) []scope.Scope {
	return []scope.Scope{
		{Host: "up.example.test", Ports: []int{80}, Paths: []string{path}},
		{Host: "ups.example.test", Paths: []string{path}},
	}
}

// chunk sends s as one chunk of a chunked request body.
func chunk(w io.Writer, s string) {
	fmt.Fprintf(w, "%x\r\n%s\r\n", len(s), s)
}

func TestInFlightRequestHeldAsItsRequest(t *testing.T) {
	paths := []struct {
		name string
		// open starts POST /up with a chunked body on one path and returns where to write it.
		open func(t *testing.T, h *harness) net.Conn
	}{
		{"proxy, absolute form", func(t *testing.T, h *harness) net.Conn {
			c := dialTimed(t, h.proxy.Listener.Addr().String())
			io.WriteString(c, "POST http://up.example.test/up HTTP/1.1\r\nHost: up.example.test\r\nTransfer-Encoding: chunked\r\n\r\n")
			return c
		}},
		{"redirected plain HTTP", func(t *testing.T, h *harness) net.Conn {
			c := dialTimed(t, h.redirected(t, "198.51.100.9:80"))
			io.WriteString(c, "POST /up HTTP/1.1\r\nHost: up.example.test\r\nTransfer-Encoding: chunked\r\n\r\n")
			return c
		}},
		{"intercepted CONNECT", func(t *testing.T, h *harness) net.Conn {
			tc := h.connectTLS(t, dialTimed(t, h.proxy.Listener.Addr().String()), "ups.example.test:443", "ups.example.test")
			io.WriteString(tc, "POST /up HTTP/1.1\r\nHost: ups.example.test\r\nTransfer-Encoding: chunked\r\n\r\n")
			return tc
		}},
	}
	endings := []struct {
		name string
		end  func(h *harness)
	}{
		// The host stays allowed; the request's path no longer is.
		{"a swap drops its path", func(h *harness) { h.setScopes(inflightScopes("/other")) }},
		{"its lease ends", func(h *harness) {
			h.mu.Lock()
			h.bindErr = binding.ErrUnknown
			h.mu.Unlock()
		}},
	}
	for _, path := range paths {
		for _, ending := range endings {
			t.Run(path.name+"/"+ending.name, func(t *testing.T) {
				h, got := inflightHarness(t)
				p := h.proxyHandler()
				c := path.open(t, h)
				chunk(c, "allowed\n")
				select {
				case line := <-got:
					if line != "allowed\n" {
						t.Fatalf("upstream got %q", line)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("the request's first chunk never reached the upstream")
				}
				ending.end(h)
				p.recheck(context.Background())
				// What the lease no longer allows is closed by the recheck, as a switched stream is.
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				_, err := c.Read(make([]byte, 1))
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					return // closed: held as its request
				}
				// Still open: show what that lets through.
				c.SetDeadline(time.Now().Add(5 * time.Second))
				chunk(c, "after\n")
				select {
				case line := <-got:
					t.Fatalf("the request is still open after the recheck, and the upstream received %q sent after %s", line, ending.name)
				case <-time.After(2 * time.Second):
					t.Fatalf("the request's connection is still open after the recheck (read: %v)", err)
				}
			})
		}
	}
}
