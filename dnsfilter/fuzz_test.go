package dnsfilter

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/scope"
)

// FuzzAnswer runs hostile packets through the resolver's decision path: it must never panic,
// and it must never answer a name outside the scopes.
func FuzzAnswer(f *testing.F) {
	for _, name := range []string{"a.example.", "evil.example.", "x.files.example.", "\\000.example."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		b, _ := m.Pack()
		f.Add(b)
	}
	set, _ := scope.Parse([]scope.Scope{{Host: "a.example"}, {Host: "*.files.example"}})
	r := New(Config{Audit: audit.Discard{}, Pins: map[string]netip.Addr{"a.example": netip.MustParseAddr("10.0.0.5")},
		Bindings: &fakeBindings{lookup: func(context.Context, netip.Addr) (binding.Binding, error) {
			return binding.Binding{Lease: "l", Scopes: set, Expires: time.Now().Add(time.Hour)}, nil
		}}})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		req := new(dns.Msg)
		if req.Unpack(pkt) != nil {
			return
		}
		resp := r.Handle(req, netip.MustParseAddr("10.0.0.2"), true)
		if resp == nil {
			t.Fatal("no response")
		}
		if resp.Rcode == dns.RcodeSuccess && len(resp.Answer) > 0 {
			name, _ := scope.CanonicalHost(req.Question[0].Name)
			if _, ok := set.AllowsName(name); !ok {
				t.Fatalf("answered %q outside the scopes", req.Question[0].Name)
			}
		}
		if _, err := resp.Pack(); err != nil {
			t.Fatalf("response does not pack: %v", err)
		}
	})
}
