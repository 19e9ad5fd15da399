package dnsfilter

import (
	"context"
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
)

// cachedBench is the resolver of the full harness writing to a real trail, and one allowed query
// from src whose answer is already cached.
func cachedBench(b *testing.B) (h *fullHarness, sink *audit.FileSink, req *dns.Msg, src netip.Addr) {
	h = newFullHarness(b, nil)
	sink, err := audit.OpenFile(audit.FileConfig{Dir: b.TempDir(), Queue: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sink.Close() })
	h.r.cfg.Audit = sink
	req = new(dns.Msg)
	req.SetQuestion("a.files.example.", dns.TypeA)
	src = netip.MustParseAddr("10.0.0.2")
	h.r.Handle(req, src, true) // fill the cache
	return h, sink, req, src
}

// BenchmarkHandleCached is one allowed query answered from the cache, with its audit record
// written to a real trail.
func BenchmarkHandleCached(b *testing.B) {
	h, sink, req, src := cachedBench(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if m := h.r.Handle(req, src, true); m.Rcode != dns.RcodeSuccess {
			b.Fatal(dns.RcodeToString[m.Rcode])
		}
		flushEvery(b, sink, i)
	}
}

// BenchmarkReplyCached is the same query as BenchmarkHandleCached taken as a UDP datagram
// through reply, the fast path: read from the packet, answered from the packed cache.
func BenchmarkReplyCached(b *testing.B) {
	h, sink, req, src := cachedBench(b)
	pkt, err := req.Pack()
	if err != nil {
		b.Fatal(err)
	}
	out := make([]byte, 0, 1232)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		flushEvery(b, sink, i)
		if resp := h.r.reply(pkt, src, out[:0]); len(resp) < 12 || resp[3]&0xf != dns.RcodeSuccess {
			m := new(dns.Msg)
			m.Unpack(resp)
			b.Fatalf("no answer: %v", m)
		}
	}
}

// flushEvery waits for the trail to catch up every 1024 queries, so the writer's work counts in
// ns/op and its queue never fills (a full queue refuses queries, as it should).
func flushEvery(b *testing.B, sink *audit.FileSink, i int) {
	if i%1024 == 1023 {
		if err := sink.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
