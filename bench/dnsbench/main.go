// Command dnsbench runs the pieces of the resolver benchmark (make bench-dns): an authoritative
// upstream for bench.test on loopback, airlock's resolver (audit on) configured so the load
// generator's address holds a lease whose scopes cover the benchmark names, and a bare reflector
// that answers without any DNS work (the floor every server pays).
//
//	dnsbench upstream -listen 127.0.0.1:15354
//	dnsbench resolver -listen 127.0.0.1:15353 -upstream 127.0.0.1:15354 -audit FILE
//	dnsbench reflect -listen 127.0.0.1:15359
package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/exfil"
	"github.com/airlock-dev/airlock/internal/benchcmd"
	"github.com/airlock-dev/airlock/scope"
)

func main() {
	benchcmd.Main("dnsbench", map[string]func(context.Context, []string) error{
		"upstream": runUpstream,
		"resolver": runResolver,
		"reflect":  runReflect,
	})
}

// runUpstream answers every name under bench.test with one A record (TTL 1h) and NXDOMAIN
// elsewhere.
func runUpstream(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:15354", "listen address")
	fs.Parse(args)
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		q := r.Question[0]
		if dns.IsSubDomain("bench.test.", q.Name) && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600},
				A: net.IPv4(93, 184, 215, 14)})
		} else if !dns.IsSubDomain("bench.test.", q.Name) {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})
	srv := &dns.Server{Addr: *listen, Net: "udp", Handler: h}
	go func() { <-ctx.Done(); srv.Shutdown() }()
	return srv.ListenAndServe()
}

func runResolver(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("resolver", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:15353", "listen address")
	upstream := fs.String("upstream", "127.0.0.1:15354", "upstream resolver")
	auditPath := fs.String("audit", "", "audit trail directory (required: the benchmark runs with query logging on)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here")
	workers := fs.Int("workers", 0, "UDP workers (0: the resolver's default)")
	fs.Parse(args)
	stopProfile, err := benchcmd.Profile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if *auditPath == "" {
		return errors.New("-audit is required")
	}
	sink, err := audit.OpenFile(audit.FileConfig{Dir: *auditPath, Node: "bench", Queue: 1 << 16})
	if err != nil {
		return err
	}
	defer sink.Close()
	set, err := scope.Parse([]scope.Scope{{Host: "*.bench.test"}})
	if err != nil {
		return err
	}
	r := dnsfilter.New(dnsfilter.Config{
		Node: "bench", Audit: sink, Upstreams: []string{*upstream}, RateQPS: -1, Workers: *workers,
		// One source stands for all sandboxes here, so the per-lease distinct-name limit is
		// raised past the benchmark's name count; the shape checks stay on.
		Guard: exfil.New(exfil.Limits{MaxDistinct: 1 << 20}),
		Bindings: binding.Static{Binding: binding.Binding{Lease: "l-bench", Task: "bench", Scopes: set,
			Expires: time.Now().Add(24 * time.Hour)}},
	})
	return r.Serve(ctx, *listen, nil)
}
