package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/scope"
)

// TestSSRFCorpus sends the address forms SSRF filters are known to miss. None may be dialed.
func TestSSRFCorpus(t *testing.T) {
	hosts := []string{
		"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.1", "0",
		"169.254.169.254", "169.254.43518", "0xa9.0xfe.0xa9.0xfe", "0251.0376.0251.0376",
		"10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "0.0.0.0", "224.0.0.1",
		"[::1]", "[::]", "[::ffff:127.0.0.1]", "[::ffff:a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]",
		"[2002:a9fe:a9fe::1]", "[fe80::1]", "[fd00::1]", "[::127.0.0.1]",
	}
	h := newHarness(t)
	// Even a scope naming every public IPv4 address must not open these.
	h.scopes = []scope.Scope{{CIDR: "1.0.0.0/8"}, {Host: "private.example.test"}}
	c := h.client()
	for _, host := range hosts {
		for _, scheme := range []string{"http", "https"} {
			t.Run(scheme+"://"+host, func(t *testing.T) {
				want := http.StatusForbidden
				resp, err := c.Get(scheme + "://" + host + "/latest/meta-data/")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != want {
						t.Fatalf("status %d, want %d", resp.StatusCode, want)
					}
				} else if !strings.Contains(err.Error(), http.StatusText(want)) {
					t.Fatalf("error %v, want %d", err, want)
				}
				if rec := h.sink.last(); rec.Decision != audit.Deny {
					t.Fatalf("audit %+v", rec)
				}
			})
		}
	}
	h.dialer.mu.Lock()
	defer h.dialer.mu.Unlock()
	if len(h.dialer.dialed) > 0 {
		t.Fatalf("the gateway dialed %v", h.dialer.dialed)
	}
}

// TestZonedAddressesRefused sends addresses with a zone, which name one of the gateway host's
// own links, in the request line, the Host header and the CONNECT line, raw (Go's client drops a
// zone before it sends). Each is refused as a host that is not one, and nothing is dialed.
func TestZonedAddressesRefused(t *testing.T) {
	h := newHarness(t)
	h.scopes = []scope.Scope{{CIDR: "1.0.0.0/8"}, {Host: "private.example.test"}}
	for _, host := range []string{"[fe80::1%25eth0]", "[::1%25lo]", "[::ffff:127.0.0.1%25lo]", "[2606:4700::1111%25eth0]", "[fe80::1%eth0]"} {
		for _, req := range []string{
			"GET http://" + host + "/latest/meta-data/ HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
			"CONNECT " + host + ":443 HTTP/1.1\r\nHost: " + host + ":443\r\n\r\n",
		} {
			t.Run(strings.Fields(req)[0]+" "+host, func(t *testing.T) {
				c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.WriteString(c, req); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("no answer to %q: %v", req, err)
				}
				resp.Body.Close()
				// Refused by net/http's parser (a raw %), as a CONNECT target that is not
				// host:port, or as a host that names a zone: each a bad request.
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("status %d, reason %q: want 400", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
				}
				if strings.HasPrefix(req, "GET") && strings.Contains(host, "%25") && !strings.Contains(resp.Header.Get("X-Airlock-Reason"), "zone") {
					t.Fatalf("reason %q: want the zone named", resp.Header.Get("X-Airlock-Reason"))
				}
			})
		}
	}
	h.dialer.mu.Lock()
	defer h.dialer.mu.Unlock()
	if len(h.dialer.dialed) > 0 {
		t.Fatalf("the gateway dialed %v", h.dialer.dialed)
	}
}

// flipResolver answers a public address first and a private one afterwards: a rebinding
// attempt between the check and the dial.
type flipResolver struct {
	mu    sync.Mutex
	calls int
}

func (f *flipResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls == 1 {
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func TestDialsTheVettedAddress(t *testing.T) {
	r := &flipResolver{}
	rd := &refusingDialer{allowed: map[string]bool{}}
	d := &dialer{resolver: r, net: rd, pins: func() map[string]netip.AddrPort { return nil }}
	d.DialContext(context.Background(), "tcp", "rebind.example.test:80")
	if r.calls != 1 || len(rd.dialed) != 1 || rd.dialed[0] != "93.184.215.14:80" {
		t.Fatalf("resolver calls %d, dialed %v: want one lookup and the vetted address", r.calls, rd.dialed)
	}
	// A second connection looks up again and is refused before dialing.
	if _, err := d.DialContext(context.Background(), "tcp", "rebind.example.test:80"); err == nil || len(rd.dialed) != 1 {
		t.Fatalf("second dial: %v, dialed %v", err, rd.dialed)
	}
}
