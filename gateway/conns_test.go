package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/scope"
)

// TestSwapAndReleaseCloseConnections: when the binding changes, tunnels and intercepted sessions
// the new binding refuses are closed within a second.
func TestSwapAndReleaseCloseConnections(t *testing.T) {
	h := newHarness(t)
	h.scopes = []scope.Scope{{Host: "git.example.test", Ports: []int{22}, Tunnel: true}, {Host: "api.example.test"}}
	h.pinEcho(t, "git.example.test:22")
	addr := serveHarness(t, h)

	open := func(target string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %v %v", target, resp, err)
		}
		return c, br
	}
	closedWithin := func(c net.Conn, r io.Reader, d time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(d))
		_, err := r.Read(make([]byte, 1))
		ne, timeout := err.(net.Error)
		return err != nil && !(timeout && ne.Timeout())
	}

	tunnel, tbr := open("git.example.test:22")
	io.WriteString(tunnel, "x")
	if b, _ := tbr.ReadByte(); b != 'x' {
		t.Fatal("tunnel does not echo")
	}
	// The token swap drops the tunnel scope: the tunnel closes.
	h.mu.Lock()
	h.scopes = []scope.Scope{{Host: "api.example.test"}}
	h.mu.Unlock()
	if !closedWithin(tunnel, tbr, 3*time.Second) {
		t.Fatal("tunnel still open after its scope was dropped")
	}

	// An idle, kept-alive intercepted session closes when the lease ends.
	c, _ := open("api.example.test:443")
	tc := tls.Client(c, &tls.Config{ServerName: "api.example.test", RootCAs: h.ca.Pool()})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if closedWithin(tc, tc, 800*time.Millisecond) {
		t.Fatal("intercepted session closed while the lease lives")
	}
	h.mu.Lock()
	h.bindErr = binding.ErrUnknown
	h.mu.Unlock()
	if !closedWithin(tc, tc, 3*time.Second) {
		t.Fatal("intercepted session still open after the lease ended")
	}
}
