package slots

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
)

func TestAddress(t *testing.T) {
	for _, tc := range []struct{ name, addr, want string }{
		{"an IPv4 peer by its address", "192.0.2.7:4431", "192.0.2.7"},
		{"an IPv4-mapped peer as IPv4", "[::ffff:192.0.2.7]:4431", "192.0.2.7"},
		{"an IPv6 peer by its /64", "[2001:db8:1:2:aaaa::1]:4431", "2001:db8:1:2::/64"},
		{"another address of the same /64 counts the same", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", "2001:db8:1:2::/64"},
		{"a zone is not a way out", "[fe80::1%eth0]:1", "fe80::/64"},
		{"anything else whole", "@unix-peer", "@unix-peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Address(addr(tc.addr)); got != tc.want {
				t.Errorf("Address(%s) = %s; want %s", tc.addr, got, tc.want)
			}
		})
	}
}

type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

// One address holds at most per_address connections, the listener at most max, and a
// connection past either is answered 429 naming the setting, with Retry-After, and closed;
// closing a connection frees its slot.
func TestConnectionsBoundedPerAddress(t *testing.T) {
	s := serveTest(t, Conns{Max: 3, PerAddress: 2}, nil)
	a1, a2 := s.dial("127.0.0.1"), s.dial("127.0.0.1") // silent: held before any request
	s.waitHeld("127.0.0.1", 2)
	s.refused(s.dial("127.0.0.1"), "127.0.0.1 already holds 2 connections to this listener, the most one address may (test.connections.per_address)")
	other := s.dial("127.0.0.2")
	s.served(other)
	s.refused(s.dial("127.0.0.3"), "this listener already holds 3 connections, the most it holds at once (test.connections.max)")
	a1.Close()
	s.waitHeld("127.0.0.1", 1)
	s.served(s.dial("127.0.0.1"))
	a2.Close()
}

// Refused connections are answered only so many at a time (per_address, node-wide), each for at
// most the header timeout; past that they are closed unanswered, so opening connections
// faster than they are refused holds no more.
func TestRefusedConnectionsAreBounded(t *testing.T) {
	s := serveTest(t, Conns{Max: 4, PerAddress: 1}, func(tm *Timeouts) { tm.Header, tm.Idle = 500*time.Millisecond, time.Minute })
	s.served(s.dial("127.0.0.1"))  // kept alive, it holds the address's one slot
	refused := s.dial("127.0.0.1") // answered when it asks; silent for now
	wait.For(t, 5*time.Second, "the listener to hold the refused connection", func() bool { return s.ln.refusing.Load() == 1 })
	s.closed(s.dial("127.0.0.1"), "a connection past the refusals held (unanswered)")
	// The refused one is closed when the header timeout ends, and frees its place.
	s.closed(refused, "a silent refused connection, after the header timeout")
	wait.For(t, 5*time.Second, "the closed refusal to free its place", func() bool { return s.ln.refusing.Load() == 0 })
	s.refused(s.dial("127.0.0.1"), "test.connections.per_address")
}

// served asserts that a request on c is answered 200 by the test handler, which keeps c open.
func (s *testServer) served(c net.Conn) {
	s.tb.Helper()
	if status, body := s.get(c, "/"); status != http.StatusOK {
		s.tb.Fatalf("GET / from %s: %d %q; want 200", c.LocalAddr(), status, body)
	}
}

// refused asserts that a request on c is answered 429 with Retry-After saying want, and that c
// is closed after.
func (s *testServer) refused(c net.Conn, want string) {
	s.tb.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		s.tb.Fatalf("GET / from %s: %v", c.LocalAddr(), err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), want) {
		s.tb.Fatalf("GET / from %s: %d (Retry-After %q) %q; want 429 saying %q", c.LocalAddr(), resp.StatusCode, resp.Header.Get("Retry-After"), b, want)
	}
	s.closed(c, "the refused connection after its answer")
}

// get sends GET path on c and reads the whole answer, within 10 s; c stays open.
func (s *testServer) get(c net.Conn, path string) (int, string) {
	s.tb.Helper()
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		s.tb.Fatalf("GET %s from %s: %v", path, c.LocalAddr(), err)
	}
	return s.answer(c)
}

// waitHeld waits until addr holds n connections.
func (s *testServer) waitHeld(addr string, n int) {
	s.tb.Helper()
	wait.For(s.tb, 5*time.Second, fmt.Sprintf("the listener to count %d connections of %s", n, addr), func() bool { return s.srv.Connections(addr) == n })
}
