package dnsfilter

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/exfil"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// countingUpstream answers every name with one public A record (or NXDOMAIN for names under
// nx.), 40 TXT strings for big.files.example, counting the questions it gets.
type countingUpstream struct {
	n     atomic.Int64
	delay atomic.Int64 // nanoseconds
}

func (u *countingUpstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	u.n.Add(1)
	time.Sleep(time.Duration(u.delay.Load()))
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	switch {
	case strings.HasPrefix(q.Name, "nx."):
		m.Rcode = dns.RcodeNameError
		m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: "files.example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
			Ns: "ns.", Mbox: "h.", Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: 10})
	case q.Qtype == dns.TypeMX:
		// The exchange's address, in the additional section, is the metadata address.
		m.Answer = append(m.Answer, &dns.MX{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeMX, Class: dns.ClassINET, Ttl: 60},
			Preference: 10, Mx: "mx.files.example."})
		m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: "mx.files.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A: net.ParseIP("169.254.169.254")})
	case q.Qtype == dns.TypeTXT:
		for i := range 40 {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60},
				Txt: []string{fmt.Sprintf("%02d-%s", i, strings.Repeat("t", 60))}})
		}
	case strings.HasPrefix(q.Name, "hint"):
		// An HTTPS or SVCB answer whose address hints name a private address.
		hint := []dns.SVCBKeyValue{&dns.SVCBIPv4Hint{Hint: []net.IP{net.ParseIP("93.184.215.14"), net.ParseIP("127.0.0.1")}}}
		if strings.HasPrefix(q.Name, "hint6.") {
			hint = []dns.SVCBKeyValue{&dns.SVCBIPv6Hint{Hint: []net.IP{net.ParseIP("fd00::1")}}}
		}
		svcb := dns.SVCB{Hdr: dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 300}, Priority: 1, Target: ".", Value: hint}
		if q.Qtype == dns.TypeHTTPS {
			m.Answer = append(m.Answer, &dns.HTTPS{SVCB: svcb})
		} else {
			m.Answer = append(m.Answer, &svcb)
		}
	default:
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.ParseIP("93.184.215.14")})
		switch {
		case strings.HasPrefix(q.Name, "glue."): // a private address in the additional section
			m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: "ns.files.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.ParseIP("10.1.2.3")})
		case strings.HasPrefix(q.Name, "auth."): // and in the authority section
			m.Ns = append(m.Ns, &dns.AAAA{Hdr: dns.RR_Header{Name: "ns.files.example.", Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 300}, AAAA: net.ParseIP("::ffff:192.168.1.1")})
		}
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := r.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		m.Truncate(size)
	}
	w.WriteMsg(m)
}

type fullHarness struct {
	addr string
	up   *countingUpstream
	sink *memSink
	r    *Resolver
}

func newFullHarness(t testing.TB, mod func(*Config)) *fullHarness {
	t.Helper()
	up := &countingUpstream{}
	// The upstream answers over UDP and TCP (for truncation fallback) on one port.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upAddr := tl.Addr().String()
	pc, err := net.ListenPacket("udp", upAddr)
	if err != nil {
		t.Skipf("udp port %s taken: %v", upAddr, err)
	}
	for _, srv := range []*dns.Server{{Listener: tl, Handler: up}, {PacketConn: pc, Handler: up}} {
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	}

	set, _ := scope.Parse([]scope.Scope{{Host: "*.files.example", DNSTypes: []string{"TXT", "MX"}}, {Host: "exact.example"}})
	sink := &memSink{}
	cfg := Config{
		Node: "n1", Audit: sink, Upstreams: []string{upAddr},
		Bindings: &fakeBindings{lookup: func(_ context.Context, a netip.Addr) (binding.Binding, error) {
			return binding.Binding{Lease: "l-1", Task: "t", Addr: a, Scopes: set, Expires: time.Now().Add(time.Hour)}, nil
		}},
		RateQPS: -1,
	}
	if mod != nil {
		mod(&cfg)
	}
	r := New(cfg)
	// The resolver takes a UDP and a TCP port of one number: one free for UDP a moment ago may
	// be another's for TCP (or UDP) by the time it listens, so a start that fails tries another.
	for try := 1; ; try++ {
		ctx, cancel := context.WithCancel(context.Background())
		l, _ := net.ListenPacket("udp", "127.0.0.1:0")
		addr := l.LocalAddr().String()
		l.Close()
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- r.Serve(ctx, addr, func() { close(ready) }) }()
		select {
		case <-ready:
			t.Cleanup(func() { cancel(); <-done })
			return &fullHarness{addr: addr, up: up, sink: sink, r: r}
		case err := <-done:
			cancel()
			if try == 5 {
				t.Fatalf("the resolver did not start in %d tries, the last on %s: %v", try, addr, err)
			}
		case <-time.After(10 * time.Second):
			cancel()
			t.Fatalf("the resolver on %s neither started nor failed in 10 s", addr)
		}
	}
}

func (h *fullHarness) ask(t *testing.T, name string, qtype uint16, edns bool, net string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(1232, false)
	}
	resp, _, err := (&dns.Client{Net: net, Timeout: 2 * time.Second}).Exchange(m, h.addr)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestCacheAndCoalescing(t *testing.T) {
	h := newFullHarness(t, nil)
	// A slow upstream keeps the first query in flight while the others come. This delay stays
	// (#32, item 7): the UDP workers take datagrams in batches and answer a batch in turn, so no
	// step of the code can show all 50 waiting on one flight; the count below is the assertion.
	h.up.delay.Store(int64(100 * time.Millisecond))
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); h.ask(t, "a.files.example.", dns.TypeA, false, "udp") }()
	}
	wg.Wait()
	if n := h.up.n.Load(); n != 1 {
		t.Fatalf("50 concurrent identical queries reached the upstream %d times", n)
	}
	h.up.delay.Store(0)
	m := h.ask(t, "a.files.example.", dns.TypeA, false, "udp")
	if h.up.n.Load() != 1 || len(m.Answer) != 1 || m.Answer[0].Header().Ttl > 300 {
		t.Fatalf("cached answer: upstream %d, %v", h.up.n.Load(), m.Answer)
	}
	// Negative answers are cached too.
	h.ask(t, "nx.files.example.", dns.TypeA, false, "udp")
	m = h.ask(t, "nx.files.example.", dns.TypeA, false, "udp")
	if m.Rcode != dns.RcodeNameError || h.up.n.Load() != 2 {
		t.Fatalf("negative caching: rcode %d upstream %d", m.Rcode, h.up.n.Load())
	}
}

func TestTunnelDefence(t *testing.T) {
	h := newFullHarness(t, func(c *Config) { c.Guard = exfil.New(exfil.Limits{MaxDistinct: 5}) })
	for _, name := range []string{
		strings.Repeat("a", 41) + ".files.example.",
		"mzxw6ytboi2dcmrtgq3dsnzzha4tmnbvg4.files.example.", // base32-ish data
		"q8Zr3kLp0XvW2nYt.files.example.",
	} {
		m := h.ask(t, name, dns.TypeA, false, "udp")
		rec := h.sink.last()
		if m.Rcode != dns.RcodeRefused || rec.Rule != rule.Tunnel || !rec.Flagged {
			t.Errorf("%s: rcode %d, record %+v", name, m.Rcode, rec)
		}
	}
	// Distinct names: five pass, the sixth new one is refused, a known one still resolves.
	for i := range 5 {
		if m := h.ask(t, fmt.Sprintf("n%d.files.example.", i), dns.TypeA, false, "udp"); m.Rcode != dns.RcodeSuccess {
			t.Fatalf("name %d refused", i)
		}
	}
	if m := h.ask(t, "n5.files.example.", dns.TypeA, false, "udp"); m.Rcode != dns.RcodeRefused || !h.sink.last().Flagged {
		t.Fatalf("sixth distinct name: rcode %d", m.Rcode)
	}
	if m := h.ask(t, "n1.files.example.", dns.TypeA, false, "udp"); m.Rcode != dns.RcodeSuccess {
		t.Fatalf("a name already seen was refused")
	}
	// An exact scope is not subject to the heuristics (its one name is fixed).
	if m := h.ask(t, "exact.example.", dns.TypeA, false, "udp"); m.Rcode != dns.RcodeSuccess {
		t.Fatalf("exact name refused")
	}
}

func TestTypesEDNSAndTruncation(t *testing.T) {
	h := newFullHarness(t, nil)
	// TXT is allowed only where a scope lists it.
	if m := h.ask(t, "exact.example.", dns.TypeTXT, false, "udp"); m.Rcode != dns.RcodeRefused {
		t.Fatalf("TXT on a scope without dns_types: rcode %d", m.Rcode)
	}
	for _, qt := range []uint16{dns.TypeANY, dns.TypeAXFR, dns.TypeNULL} {
		if m := h.ask(t, "a.files.example.", qt, false, "udp"); m.Rcode != dns.RcodeRefused {
			t.Fatalf("%s: rcode %d", dns.TypeToString[qt], m.Rcode)
		}
	}
	// A big TXT answer: truncated over UDP without EDNS, whole over TCP.
	m := h.ask(t, "big.files.example.", dns.TypeTXT, false, "udp")
	if m.Compress = true; !m.Truncated || m.Len() > 512 || len(m.Answer) >= 40 {
		t.Fatalf("UDP answer not truncated: rcode %s tc=%v len=%d %v", dns.RcodeToString[m.Rcode], m.Truncated, m.Len(), h.sink.last())
	}
	m = h.ask(t, "big.files.example.", dns.TypeTXT, true, "tcp")
	if m.Truncated || len(m.Answer) != 40 || m.IsEdns0() == nil {
		t.Fatalf("TCP answer: tc=%v answers=%d edns=%v", m.Truncated, len(m.Answer), m.IsEdns0() != nil)
	}
}

func TestRateLimitAndMalformed(t *testing.T) {
	var clock atomic.Int64 // the resolver's clock, so the bucket refills without a wait
	clock.Store(time.Now().UnixNano())
	h := newFullHarness(t, func(c *Config) {
		c.RateQPS, c.RateBurst = 1, 3
		c.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	refused := 0
	for range 6 {
		if m := h.ask(t, "exact.example.", dns.TypeA, false, "udp"); m.Rcode == dns.RcodeRefused {
			refused++
		}
	}
	if refused < 2 || h.sink.last().Rule != rule.RateLimit {
		t.Fatalf("rate limit: %d refused, last rule %s", refused, h.sink.last().Rule)
	}
	// A refusal over the rate still names the lease (from the cache), so the lease's own trail,
	// receipt and denial count show the flood.
	if l := h.sink.last(); l.Lease != "l-1" || l.Task != "t" {
		t.Fatalf("the rate-limited query's record names no lease: %+v", l)
	}
	// Garbage never stops the server.
	c, _ := net.Dial("udp", h.addr)
	defer c.Close()
	for _, pkt := range [][]byte{{1}, {0, 1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0xff}, make([]byte, 600)} {
		c.Write(pkt)
	}
	clock.Add(int64(1100 * time.Millisecond)) // the bucket refills
	if m := h.ask(t, "exact.example.", dns.TypeA, false, "udp"); m.Rcode != dns.RcodeSuccess {
		t.Fatalf("after garbage: rcode %d", m.Rcode)
	}
}

// The resolver never hands a sandbox a private address for a public name, in any section: the
// additional and authority sections and the address hints of HTTPS and SVCB answers included,
// on the general path and from the cache. Nor does it name the address in the refusal's
// extended error: the sandbox is told the rule and the name, the record keeps the address.
func TestNoPrivateAddressInAnySection(t *testing.T) {
	h := newFullHarness(t, nil)
	for _, c := range []struct {
		name    string
		qtype   uint16
		private string // the address the answer held, as the record names it
	}{
		{"glue.files.example.", dns.TypeA, "10.1.2.3"},
		{"auth.files.example.", dns.TypeA, "192.168.1.1"},
		{"hint4.files.example.", dns.TypeHTTPS, "127.0.0.1"},
		{"hint4.files.example.", dns.TypeSVCB, "127.0.0.1"},
		{"hint6.files.example.", dns.TypeHTTPS, "fd00::1"},
		{"mail.files.example.", dns.TypeMX, "169.254.169.254"},
	} {
		for _, try := range []string{"first", "cached"} {
			for _, edns := range []bool{false, true} {
				m := h.ask(t, c.name, c.qtype, edns, "udp")
				rec := h.sink.last()
				if m.Rcode != dns.RcodeRefused || rec.Rule != rule.PrivateAddress {
					t.Errorf("%s %s (%s, edns %v): rcode %d, record rule %q: %v", c.name, dns.TypeToString[c.qtype], try, edns, m.Rcode, rec.Rule, m)
				}
				for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
					if len(sec) > 0 && sec[0].Header().Rrtype != dns.TypeOPT {
						t.Errorf("%s: the refusal carries records: %v", c.name, m)
					}
				}
				host := strings.TrimSuffix(c.name, ".")
				if text := edeText(m); strings.Contains(text, c.private) || !strings.Contains(text, string(rule.PrivateAddress)) || !strings.Contains(text, host) {
					t.Errorf("%s: the sandbox is told %q: want the rule and the name, not the address %s", c.name, text, c.private)
				}
				if !strings.Contains(m.String(), "EDE") || strings.Contains(m.String(), c.private) {
					t.Errorf("%s: the refusal names %s: %v", c.name, c.private, m)
				}
				if !strings.Contains(rec.Reason, c.private) {
					t.Errorf("%s: the record's reason %q lost the address %s", c.name, rec.Reason, c.private)
				}
			}
		}
	}
	// A plain public answer still resolves.
	if m := h.ask(t, "ok.files.example.", dns.TypeA, false, "udp"); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("public answer: %v", m)
	}
}

// edeText is the extra text of m's extended DNS error, if it has one.
func edeText(m *dns.Msg) string {
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if x, ok := e.(*dns.EDNS0_EDE); ok {
				return x.ExtraText
			}
		}
	}
	return ""
}
