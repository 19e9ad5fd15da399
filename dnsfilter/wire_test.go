package dnsfilter

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// wireResolver is a resolver whose upstream answers public.example.test publicly,
// rebind.example.test with a private address behind a CNAME, nx.example.test with NXDOMAIN and
// big.example.test with 40 TXT strings; its cache clock is the returned pointer.
func wireResolver(t testing.TB) (*Resolver, *memSink, *time.Time) {
	upstream := serve(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		hdr := func(name string, t uint16) dns.RR_Header {
			return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: 300}
		}
		switch strings.ToLower(q.Name) {
		case "public.example.test.":
			if q.Qtype == dns.TypeAAAA {
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(q.Name, dns.TypeAAAA), AAAA: net.ParseIP("2606:2800:21f:cb07:6820:80da:af6b:8b2c")})
			} else {
				m.Answer = append(m.Answer,
					&dns.A{Hdr: hdr(q.Name, dns.TypeA), A: net.ParseIP("93.184.215.14")},
					&dns.A{Hdr: hdr(q.Name, dns.TypeA), A: net.ParseIP("93.184.215.15")})
			}
		case "rebind.example.test.":
			m.Answer = append(m.Answer,
				&dns.CNAME{Hdr: hdr(q.Name, dns.TypeCNAME), Target: "inner.example.test."},
				&dns.A{Hdr: hdr("inner.example.test.", dns.TypeA), A: net.ParseIP("169.254.169.254")})
		case "nx.example.test.":
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, &dns.SOA{Hdr: hdr("example.test.", dns.TypeSOA), Ns: "ns.example.test.", Mbox: "h.example.test.",
				Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: 60})
		case "big.example.test.":
			for i := range 40 {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(q.Name, dns.TypeTXT), Txt: []string{fmt.Sprintf("%02d-%s", i, strings.Repeat("t", 60))}})
			}
		}
		w.WriteMsg(m)
	}))
	set, err := scope.Parse([]scope.Scope{{Host: "public.example.test"}, {Host: "rebind.example.test"}, {Host: "nx.example.test"},
		{Host: "big.example.test", DNSTypes: []string{"TXT"}}, {Host: "pinned.example.test"}, {Host: "*.files.example.test"}})
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	r := New(Config{
		Node: "n1", Audit: sink, Upstreams: []string{upstream}, RateQPS: -1,
		Pins: map[string]netip.Addr{"pinned.example.test": netip.MustParseAddr("10.9.9.9")},
		Bindings: &fakeBindings{lookup: func(_ context.Context, a netip.Addr) (binding.Binding, error) {
			return binding.Binding{Lease: "l-1", Task: "task-1", Addr: a, Scopes: set, Expires: time.Now().Add(time.Hour)}, nil
		}},
	})
	now := time.Now()
	r.now = func() time.Time { return now }
	return r, sink, &now
}

func packQuery(t testing.TB, name string, qtype uint16, edns func(*dns.Msg)) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 4242
	if edns != nil {
		edns(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFastPathMatchesGeneralPath sends the same queries through the fast path and through the
// general one (unpack, Handle, pack) and requires the same answer and the same audit record.
func TestFastPathMatchesGeneralPath(t *testing.T) {
	r, sink, now := wireResolver(t)
	src := netip.MustParseAddr("10.0.0.2")
	plainEDNS := func(m *dns.Msg) { m.SetEdns0(1232, false) }
	withDO := func(m *dns.Msg) { m.SetEdns0(4096, true) }
	cookie := func(m *dns.Msg) {
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
	}
	small := func(m *dns.Msg) { m.SetEdns0(600, false) }
	cases := []struct {
		name  string
		qtype uint16
		edns  func(*dns.Msg)
		fast  bool // answered from the packed cache
	}{
		{"public.example.test.", dns.TypeA, nil, true},
		{"PuBLic.Example.TEST.", dns.TypeA, plainEDNS, true}, // 0x20 spelling
		{"public.example.test.", dns.TypeAAAA, withDO, true},
		{"public.example.test.", dns.TypeA, cookie, true},
		{"nx.example.test.", dns.TypeA, nil, true},
		{"big.example.test.", dns.TypeTXT, plainEDNS, true},
		{"big.example.test.", dns.TypeTXT, nil, false},   // too big for 512: truncated the general way
		{"big.example.test.", dns.TypeTXT, small, false}, // too big for 600
		{"rebind.example.test.", dns.TypeA, nil, false},  // private answer: refused the general way
		{"pinned.example.test.", dns.TypeA, nil, false},
		{"evil.example.test.", dns.TypeA, nil, false},
		{"public.example.test.", dns.TypeTXT, nil, false},
		{"mzxw6ytboi2dcmrtgq3dsnzzha4tmnbvg4.files.example.test.", dns.TypeA, nil, false},
	}
	for _, c := range cases {
		pkt := packQuery(t, c.name, c.qtype, c.edns)
		r.reply(pkt, src, nil)                                     // fill the cache
		for _, age := range []time.Duration{0, 20 * time.Second} { // negative answers live 30s
			*now = now.Add(age)
			fast := r.reply(pkt, src, nil)
			fastRec := sink.last()
			req := new(dns.Msg)
			if err := req.Unpack(pkt); err != nil {
				t.Fatal(err)
			}
			general := pack(r.Handle(req, src, true), nil)
			generalRec := sink.last()

			q, parsed := parseQuery(pkt)
			_, _, hit := r.cache.getWire(cacheKey{lowerASCII(q.name), q.qtype, dns.ClassINET}, *now)
			if !parsed {
				t.Fatalf("%s: the fast path does not parse a plain query", c.name)
			}
			if hit != c.fast && c.qtype != dns.TypeTXT && !strings.HasPrefix(c.name, "rebind") {
				t.Errorf("%s: cached for the fast path = %v, want %v", c.name, hit, c.fast)
			}
			a, b := new(dns.Msg), new(dns.Msg)
			if err := a.Unpack(fast); err != nil {
				t.Fatalf("%s: fast answer does not unpack: %v", c.name, err)
			}
			if err := b.Unpack(general); err != nil {
				t.Fatal(err)
			}
			if sa, sb := strings.ToLower(a.String()), strings.ToLower(b.String()); sa != sb {
				t.Errorf("%s %s age %s:\nfast:\n%s\ngeneral:\n%s", c.name, dns.TypeToString[c.qtype], age, sa, sb)
			}
			if a.Question[0].Name != c.name {
				t.Errorf("%s: question came back as %s", c.name, a.Question[0].Name)
			}
			fastRec.DurationMS, generalRec.DurationMS = 0, 0
			fastRec.Time, generalRec.Time = time.Time{}, time.Time{}
			if fmt.Sprint(fastRec) != fmt.Sprint(generalRec) {
				t.Errorf("%s: records differ:\nfast    %+v\ngeneral %+v", c.name, fastRec, generalRec)
			}
		}
	}
	// The aged answers really are aged.
	*now = now.Add(time.Hour)
	pkt := packQuery(t, "public.example.test.", dns.TypeA, nil)
	r.reply(pkt, src, nil)
	*now = now.Add(200 * time.Second)
	m := new(dns.Msg)
	if err := m.Unpack(r.reply(pkt, src, nil)); err != nil {
		t.Fatal(err)
	}
	if len(m.Answer) != 2 || m.Answer[0].Header().Ttl != 100 || m.Answer[1].Header().Ttl != 100 {
		t.Fatalf("after 200s of a 300s TTL: %v", m.Answer)
	}
	*now = now.Add(time.Hour)
	if _, _, hit := r.cache.getWire(cacheKey{"public.example.test.", dns.TypeA, dns.ClassINET}, *now); hit {
		t.Fatal("an expired answer is still served from the packed cache")
	}
}

// TestFastPathRefusesRebinding: a private answer in the cache never leaves through the fast path.
func TestFastPathRefusesRebinding(t *testing.T) {
	r, sink, _ := wireResolver(t)
	src := netip.MustParseAddr("10.0.0.2")
	pkt := packQuery(t, "rebind.example.test.", dns.TypeA, nil)
	for range 3 {
		m := new(dns.Msg)
		if err := m.Unpack(r.reply(pkt, src, nil)); err != nil {
			t.Fatal(err)
		}
		if m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 || sink.last().Rule != rule.PrivateAddress {
			t.Fatalf("rcode %s, %d answers, rule %s", dns.RcodeToString[m.Rcode], len(m.Answer), sink.last().Rule)
		}
	}
}

// TestFastPathFailsClosed: a cached answer whose record the trail refuses is not sent.
func TestFastPathFailsClosed(t *testing.T) {
	r, _, _ := wireResolver(t)
	src := netip.MustParseAddr("10.0.0.2")
	pkt := packQuery(t, "public.example.test.", dns.TypeA, nil)
	r.reply(pkt, src, nil)
	r.cfg.Audit = failingSink{}
	m := new(dns.Msg)
	if err := m.Unpack(r.reply(pkt, src, nil)); err != nil {
		t.Fatal(err)
	}
	if m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 {
		t.Fatalf("unrecorded answer sent: %v", m)
	}
}

// TestParseQueryLeavesUnusualPacketsToTheGeneralPath: whatever parseQuery does not fully
// understand goes the general way (and is still answered there).
func TestParseQueryLeavesUnusualPacketsToTheGeneralPath(t *testing.T) {
	base := packQuery(t, "public.example.test.", dns.TypeA, nil)
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), base...)) }
	two := new(dns.Msg)
	two.Question = []dns.Question{{Name: "a.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: "b.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	twoPkt, _ := two.Pack()
	v1 := packQuery(t, "public.example.test.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false); m.IsEdns0().SetVersion(1) })
	opt := packQuery(t, "public.example.test.", dns.TypeA, func(m *dns.Msg) {
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
	})
	badOpt := append([]byte(nil), opt...)
	badOpt[len(badOpt)-9] = 40 // option length past the record
	for name, pkt := range map[string][]byte{
		"response":          edit(func(b []byte) []byte { b[2] |= 0x80; return b }),
		"opcode notify":     edit(func(b []byte) []byte { b[2] |= dns.OpcodeNotify << 3; return b }),
		"two questions":     twoPkt,
		"class CH":          edit(func(b []byte) []byte { b[len(b)-1] = dns.ClassCHAOS; return b }),
		"trailing bytes":    append(append([]byte(nil), base...), 0),
		"truncated":         base[:len(base)-2],
		"compressed name":   edit(func(b []byte) []byte { return append(b[:12], 0xc0, 12, 0, 1, 0, 1) }),
		"escaped byte":      edit(func(b []byte) []byte { b[13] = '.'; return b }),
		"zero byte":         edit(func(b []byte) []byte { b[13] = 0; return b }),
		"root":              edit(func(b []byte) []byte { return append(b[:12], 0, 0, 1, 0, 1) }),
		"answer count":      edit(func(b []byte) []byte { b[7] = 1; return b }),
		"EDNS version 1":    v1,
		"bad option length": badOpt,
	} {
		if _, ok := parseQuery(pkt); ok {
			t.Errorf("%s: taken by the fast path", name)
		}
	}
	if q, ok := parseQuery(opt); !ok || !q.edns || q.udpSize != 1232 {
		t.Fatalf("a query with a cookie option: %+v %v", q, ok)
	}
}

// FuzzWire: any packet through the UDP reply path (fast path first) never panics; what the fast
// path takes, the general parser reads as the same question; no answer leaves for a name
// outside the scopes.
func FuzzWire(f *testing.F) {
	for _, name := range []string{"public.example.test.", "PUBLIC.example.test.", "x.files.example.test.", "evil.example.test."} {
		f.Add(packQuery(f, name, dns.TypeA, nil))
		f.Add(packQuery(f, name, dns.TypeAAAA, func(m *dns.Msg) { m.SetEdns0(1232, true) }))
	}
	r, _, _ := wireResolver(f)
	r.cfg.Audit = audit.Discard{}
	src := netip.MustParseAddr("10.0.0.2")
	r.reply(packQuery(f, "public.example.test.", dns.TypeA, nil), src, nil)
	set, _ := scope.Parse([]scope.Scope{{Host: "public.example.test"}, {Host: "rebind.example.test"}, {Host: "nx.example.test"},
		{Host: "big.example.test"}, {Host: "pinned.example.test"}, {Host: "*.files.example.test"}})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if q, ok := parseQuery(pkt); ok {
			m := new(dns.Msg)
			if err := m.Unpack(pkt); err != nil {
				t.Fatalf("fast path took a packet the general parser refuses: %v", err)
			}
			if m.Question[0].Name != q.name || m.Question[0].Qtype != q.qtype {
				t.Fatalf("fast path read %s/%d, general %s/%d", q.name, q.qtype, m.Question[0].Name, m.Question[0].Qtype)
			}
		}
		out := r.reply(pkt, src, nil)
		if out == nil {
			return
		}
		m := new(dns.Msg)
		if err := m.Unpack(out); err != nil {
			t.Fatalf("reply does not unpack: %v", err)
		}
		if len(m.Answer) > 0 && len(m.Question) == 1 {
			name, _ := scope.CanonicalHost(m.Question[0].Name)
			if _, ok := set.AllowsName(name); !ok {
				t.Fatalf("answered %q outside the scopes", m.Question[0].Name)
			}
		}
	})
}
