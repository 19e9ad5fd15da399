package dnsfilter

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/gateway/audit"
)

// BenchmarkHandleCached is one allowed query answered from the cache, with its audit record
// written to a real trail.
func BenchmarkHandleCached(b *testing.B) {
	h := newFullHarness(b, nil)
	sink, err := audit.OpenFile(audit.FileConfig{Path: b.TempDir() + "/audit.jsonl", Queue: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	h.r.cfg.Audit = sink
	req := new(dns.Msg)
	req.SetQuestion("a.files.example.", dns.TypeA)
	src := netip.MustParseAddr("10.0.0.2")
	h.r.Handle(req, src, true) // fill the cache
	b.ReportAllocs()
	for b.Loop() {
		if m := h.r.Handle(req, src, true); m.Rcode != dns.RcodeSuccess {
			b.Fatal(dns.RcodeToString[m.Rcode])
		}
	}
}
