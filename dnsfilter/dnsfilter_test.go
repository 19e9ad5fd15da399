package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

type fakeBindings struct {
	lookup func(ctx context.Context, addr netip.Addr) (binding.Binding, error)
}

func (f *fakeBindings) Lookup(ctx context.Context, a netip.Addr) (binding.Binding, error) {
	return f.lookup(ctx, a)
}

// Peek is Lookup for what the cache already holds.
func (f *fakeBindings) Peek(a netip.Addr) (binding.Binding, bool) {
	b, err := f.lookup(context.Background(), a)
	return b, err == nil
}

type memSink struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (m *memSink) Write(_ context.Context, r audit.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, r)
	return nil
}

func (m *memSink) last() audit.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recs[len(m.recs)-1]
}

// serve runs h on a loopback UDP port until the test ends.
func serve(t testing.TB, h dns.Handler) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: h}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

func TestResolver(t *testing.T) {
	// The upstream answers public.example.test publicly and rebind.example.test with a private
	// address behind a CNAME.
	upstream := serve(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch q.Name {
		case "public.example.test.":
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP("93.184.215.14")})
		case "rebind.example.test.":
			m.Answer = append(m.Answer,
				&dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 60}, Target: "inner.example.test."},
				&dns.A{Hdr: dns.RR_Header{Name: "inner.example.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP("169.254.169.254")})
		}
		w.WriteMsg(m)
	}))
	set, _ := scope.Parse([]scope.Scope{{Host: "public.example.test"}, {Host: "rebind.example.test"}, {Host: "*.files.example.test"}, {Host: "pinned.example.test"}})
	var unknown, down atomic.Bool
	sink := &memSink{}
	r := New(Config{
		Node: "n1", Audit: sink, Upstreams: []string{upstream},
		Pins: map[string]netip.Addr{"pinned.example.test": netip.MustParseAddr("10.9.9.9")},
		Bindings: &fakeBindings{lookup: func(_ context.Context, a netip.Addr) (binding.Binding, error) {
			if unknown.Load() {
				return binding.Binding{}, binding.ErrUnknown
			}
			if down.Load() {
				return binding.Binding{}, fmt.Errorf("%w: dial tcp 127.0.0.1:6379: connect: connection refused", binding.ErrUnavailable)
			}
			return binding.Binding{Lease: "l-1", Task: "task-1", Addr: a, Scopes: set, Expires: time.Now().Add(time.Hour)}, nil
		}},
	})
	addr := serve(t, r)
	c := &dns.Client{Timeout: 2 * time.Second}
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		resp, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ede := func(m *dns.Msg) string {
		if o := m.IsEdns0(); o != nil {
			for _, e := range o.Option {
				if x, ok := e.(*dns.EDNS0_EDE); ok {
					return dns.ExtendedErrorCodeToString[x.InfoCode] + ": " + x.ExtraText
				}
			}
		}
		return ""
	}

	tests := []struct {
		name    string
		qname   string
		qtype   uint16
		rcode   int
		answers int
		rule    rule.Rule
		ede     string
	}{
		{"allowed name forwarded", "public.example.test.", dns.TypeA, dns.RcodeSuccess, 1, rule.Scope, ""},
		{"name outside scopes", "evil.example.test.", dns.TypeA, dns.RcodeRefused, 0, rule.ScopeMiss, "Blocked: scope-miss: task task-1 has no scope for evil.example.test"},
		{"wildcard covers one label", "a.files.example.test.", dns.TypeTXT, dns.RcodeRefused, 0, rule.QType, "Blocked"},
		{"private answer behind a CNAME", "rebind.example.test.", dns.TypeA, dns.RcodeRefused, 0, rule.PrivateAddress, "Filtered: private-address: rebind.example.test resolved to a non-public address"},
		{"pinned private upstream", "pinned.example.test.", dns.TypeA, dns.RcodeSuccess, 1, rule.Scope, ""},
		{"TXT refused", "public.example.test.", dns.TypeTXT, dns.RcodeRefused, 0, rule.QType, "Blocked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ask(tt.qname, tt.qtype)
			if m.Rcode != tt.rcode || len(m.Answer) < tt.answers {
				t.Fatalf("rcode %s answers %d", dns.RcodeToString[m.Rcode], len(m.Answer))
			}
			if tt.ede != "" && !strings.HasPrefix(ede(m), tt.ede) {
				t.Fatalf("EDE %q, want prefix %q", ede(m), tt.ede)
			}
			if rec := sink.last(); rec.Rule != tt.rule || rec.Lease != "l-1" || rec.QName != tt.qname {
				t.Fatalf("audit record %+v", rec)
			}
		})
	}
	t.Run("unknown source", func(t *testing.T) {
		unknown.Store(true)
		defer unknown.Store(false)
		m := ask("public.example.test.", dns.TypeA)
		if m.Rcode != dns.RcodeRefused || sink.last().Rule != rule.NoLease {
			t.Fatalf("rcode %s rule %s", dns.RcodeToString[m.Rcode], sink.last().Rule)
		}
	})
	// The lease store's error names its address: the record keeps it, the sandbox is told only
	// that the store is unavailable.
	t.Run("store down", func(t *testing.T) {
		down.Store(true)
		defer down.Store(false)
		m := ask("public.example.test.", dns.TypeA)
		rec := sink.last()
		if m.Rcode != dns.RcodeRefused || rec.Rule != rule.StoreDown {
			t.Fatalf("rcode %s rule %s", dns.RcodeToString[m.Rcode], rec.Rule)
		}
		if text := ede(m); text != "Prohibited: lease-store-down: the lease store is unavailable" {
			t.Fatalf("the sandbox is told %q", text)
		}
		if !strings.Contains(rec.Reason, "127.0.0.1:6379") {
			t.Fatalf("the record's reason %q lost the store's error", rec.Reason)
		}
	})
}

func TestResolverFailsClosedOnAudit(t *testing.T) {
	r := New(Config{Audit: failingSink{}, Bindings: &fakeBindings{lookup: func(context.Context, netip.Addr) (binding.Binding, error) {
		return binding.Binding{}, errors.New("unused")
	}}})
	addr := serve(t, r)
	m := new(dns.Msg)
	m.SetQuestion("a.example.", dns.TypeA)
	resp, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, addr)
	if err != nil || resp.Rcode != dns.RcodeRefused {
		t.Fatalf("resp %v err %v", resp, err)
	}
}

type failingSink struct{}

func (failingSink) Write(context.Context, audit.Record) error { return audit.ErrUnavailable }
