package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/netutil"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
)

// maxTCPConns bounds concurrent TCP connections to the resolver.
const maxTCPConns = 256

// Serve answers on addr over UDP and TCP until ctx ends, calling ready (if not nil) once both
// listen. UDP is read by a fixed pool of workers, so a flood of packets queues in the socket
// instead of spawning a goroutine each; TCP connections are capped at maxTCPConns.
func (r *Resolver) Serve(ctx context.Context, addr string, ready func()) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("dnsfilter: listen udp %s: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("dnsfilter: listen tcp %s: %w", addr, err)
	}
	tcp := &dns.Server{Listener: netutil.LimitListener(ln, maxTCPConns), Handler: r, ReadTimeout: 5 * time.Second, MaxTCPQueries: 128}
	started := make(chan struct{})
	tcp.NotifyStartedFunc = func() { close(started) }
	errs := make(chan error, 1)
	go func() { errs <- tcp.ActivateAndServe() }()
	select {
	case err := <-errs:
		pc.Close()
		return fmt.Errorf("dnsfilter: tcp: %w", err)
	case <-started:
	}
	workers := r.cfg.Workers
	if workers <= 0 {
		workers = 8 * runtime.GOMAXPROCS(0)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() { defer wg.Done(); r.udpWorker(pc) }()
	}
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	pc.Close()
	tcp.ShutdownContext(context.Background())
	wg.Wait()
	return nil
}

// udpLoop answers one datagram per system call: the portable way, where batching is not
// available.
func (r *Resolver) udpLoop(pc net.PacketConn) {
	buf := make([]byte, 65535)
	out := make([]byte, 0, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		ua, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		src, _ := netip.AddrFromSlice(ua.IP)
		packed := r.reply(buf[:n], src.Unmap(), out[:0])
		if packed == nil {
			continue
		}
		pc.WriteTo(packed, from)
	}
}

// reply answers one datagram into out, through the fast path when it takes the packet; nil means
// there is nothing to send.
func (r *Resolver) reply(pkt []byte, src netip.Addr, out []byte) []byte {
	if b, handled := r.handleWire(pkt, src, out); handled {
		return b
	}
	req := new(dns.Msg)
	if err := req.Unpack(pkt); err != nil {
		resp := r.malformed(pkt, src)
		if resp == nil {
			return nil // not even a header: nothing to answer
		}
		return pack(resp, out)
	}
	return pack(r.Handle(req, src, true), out)
}

// malformed answers FORMERR to a packet whose header parses but whose body does not, and
// records it; it returns nil when there is no header to answer.
func (r *Resolver) malformed(pkt []byte, src netip.Addr) *dns.Msg {
	if len(pkt) < 12 {
		return nil
	}
	hdr := new(dns.Msg)
	hdr.Id = uint16(pkt[0])<<8 | uint16(pkt[1])
	if pkt[2]&0x80 != 0 {
		return nil // a response: never answer those
	}
	m := new(dns.Msg)
	m.SetRcode(hdr, dns.RcodeFormatError)
	m.Id = hdr.Id
	rec := malformedRecord(r.cfg.Node, src)
	r.metrics.query(string(rec.Decision), rec.Rule.String(), "other")
	if r.cfg.Audit.Write(context.Background(), rec) != nil {
		r.metrics.auditRefused()
	}
	return m
}

func malformedRecord(node string, src netip.Addr) audit.Record {
	return audit.Record{Time: time.Now(), Kind: audit.KindDNS, Node: node, Source: src.String(),
		Decision: audit.Deny, Rule: rule.BadRequest, Reason: "malformed DNS message"}
}
