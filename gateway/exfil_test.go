package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/exfil"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// recordingResolver answers every name with a public address and remembers what it was asked.
type recordingResolver struct {
	mu    sync.Mutex
	names []string
}

func (r *recordingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.names = append(r.names, host)
	r.mu.Unlock()
	return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
}

func (r *recordingResolver) asked(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.names {
		if n == name {
			return true
		}
	}
	return false
}

// The gateway's own lookups are guarded like the resolver's: under a wildcard scope a name that
// carries data is refused before the gateway looks it up, by CONNECT, intercepted or plain, and
// every lookup it does make is recorded.
func TestGatewayLookupsGuarded(t *testing.T) {
	random := func() string {
		b := make([]byte, 31)
		rand.Read(b)
		return hex.EncodeToString(b)[:61] + "zz" // 63 characters of "data"
	}
	setup := func(t *testing.T) (*harness, *recordingResolver) {
		h := newHarness(t)
		h.scopes = []scope.Scope{{Host: "*.files.example.test"}, {Host: "*.ssh.example.test", Ports: []int{22}, Tunnel: true}}
		res := &recordingResolver{}
		h.proxyHandler().dial.resolver = res
		return h, res
	}
	t.Run("intercepted", func(t *testing.T) {
		h, res := setup(t)
		name := random() + ".files.example.test"
		status, got := rawIntercepted(t, withTarget(h, name+":443"), "GET / HTTP/1.1\r\nHost: "+name+"\r\n\r\n")
		if status != 403 || got != rule.Tunnel {
			t.Fatalf("status %d rule %q, want 403 %s", status, got, rule.Tunnel)
		}
		if res.asked(name) {
			t.Fatal("the gateway looked the name up")
		}
		if rec := h.sink.last(); rec.Rule != rule.Tunnel || !rec.Flagged {
			t.Fatalf("audit record %+v", rec)
		}
	})
	t.Run("plain", func(t *testing.T) {
		h, res := setup(t)
		name := random() + ".files.example.test"
		status, got := rawPlain(t, h, "GET http://"+name+"/ HTTP/1.1\r\nHost: "+name+"\r\n\r\n")
		if status != 403 || got != rule.Tunnel || res.asked(name) {
			t.Fatalf("status %d rule %q, looked up %v", status, got, res.asked(name))
		}
	})
	t.Run("tunnel", func(t *testing.T) {
		h, res := setup(t)
		name := random() + ".ssh.example.test"
		c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		status, got := connectStatus(t, c, name+":22")
		if status != 403 || got != rule.Tunnel || res.asked(name) {
			t.Fatalf("status %d rule %q, looked up %v", status, got, res.asked(name))
		}
	})
	t.Run("lookups are recorded", func(t *testing.T) {
		h, res := setup(t)
		rawPlain(t, h, "GET http://cdn.files.example.test/ HTTP/1.1\r\nHost: cdn.files.example.test\r\n\r\n")
		if !res.asked("cdn.files.example.test") {
			t.Fatal("the name was not looked up")
		}
		rec, ok := h.sink.await(func(r audit.Record) bool { return r.Kind == audit.KindDNS && r.Event == "gateway-lookup" })
		if !ok || rec.QName != "cdn.files.example.test" || rec.Lease != "l-1" || rec.Answers != 1 || rec.Decision != audit.Allow {
			t.Fatalf("lookup record %+v", rec)
		}
		// The answer is kept: a second request does not look the name up again.
		n := len(res.names)
		rawPlain(t, h, "GET http://cdn.files.example.test/x HTTP/1.1\r\nHost: cdn.files.example.test\r\n\r\n")
		if len(res.names) != n {
			t.Fatalf("a kept answer was looked up again: %v", res.names)
		}
	})
	t.Run("one count with the resolver", func(t *testing.T) {
		h, _ := setup(t)
		g := exfil.New(exfil.Limits{MaxDistinct: 3})
		h.proxyHandler().cfg.Guard = g
		set, _ := scope.Parse(h.scopes)
		r := dnsfilter.New(dnsfilter.Config{Audit: audit.Discard{}, Guard: g, RateQPS: -1,
			Bindings: &fakeBindings{lookup: func(_ context.Context, a netip.Addr) (binding.Binding, error) {
				return binding.Binding{Lease: "l-1", Addr: a, Scopes: set, Expires: time.Now().Add(time.Hour)}, nil
			}}})
		for _, n := range []string{"a.files.example.test.", "b.files.example.test."} {
			q := new(dns.Msg)
			q.SetQuestion(n, dns.TypeA)
			r.Handle(q, netip.MustParseAddr("10.0.0.2"), true)
		}
		if status, _ := rawPlain(t, h, "GET http://c.files.example.test/ HTTP/1.1\r\nHost: c.files.example.test\r\n\r\n"); status == 403 {
			t.Fatal("the third distinct name was refused")
		}
		status, got := rawPlain(t, h, "GET http://d.files.example.test/ HTTP/1.1\r\nHost: d.files.example.test\r\n\r\n")
		if status != 403 || got != rule.Tunnel {
			t.Fatalf("fourth distinct name across resolver and gateway: status %d rule %q", status, got)
		}
	})
}

// withTarget lets rawIntercepted connect to target instead of api.example.test.
func withTarget(h *harness, target string) *harness {
	h.target = target
	return h
}
