package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/gateway/audit"
	"github.com/airlock-dev/airlock/gateway/binding"
	"github.com/airlock-dev/airlock/gateway/scope"
)

// Rule names, shared vocabulary with the gateway's audit records.
const (
	RuleScope     = "scope"
	RuleNoLease   = "no-lease"
	RuleStoreDown = "lease-store-down"
	RuleScopeMiss = "scope-miss"
	RuleQType     = "qtype"
	RuleRebinding = "private-address"
	RuleMalformed = "bad-request"
	RuleUpstream  = "upstream-failed"
	RuleAuditDown = "audit-unavailable"
)

// Bindings finds the lease a sandbox address holds; *binding.Cache meets it.
type Bindings interface {
	Lookup(ctx context.Context, addr netip.Addr) (binding.Binding, error)
}

// Config is what a Resolver needs.
type Config struct {
	Node     string
	Bindings Bindings
	Audit    audit.Sink
	// Pins answers these names (canonical, no trailing dot) with the pinned address instead of
	// asking upstream: the operator's private upstreams, the only names that may resolve
	// privately.
	Pins map[string]netip.Addr
	// Upstreams are resolvers ("host:port") allowed names are forwarded to.
	Upstreams []string
	Logger    *slog.Logger
}

// Resolver is the DNS handler. Safe for concurrent use.
type Resolver struct {
	cfg     Config
	pins    atomic.Pointer[map[string]netip.Addr]
	client  *dns.Client
	log     *slog.Logger
	metrics *Metrics // nil until NewMetrics
}

// New returns a Resolver.
func New(cfg Config) *Resolver {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Resolver{cfg: cfg, client: &dns.Client{Timeout: 3 * time.Second}, log: cfg.Logger}
	r.SetPins(cfg.Pins)
	return r
}

// SetPins replaces the pinned private names (see Config.Pins).
func (r *Resolver) SetPins(pins map[string]netip.Addr) { r.pins.Store(&pins) }

var allowedTypes = map[uint16]bool{
	dns.TypeA: true, dns.TypeAAAA: true, dns.TypeCNAME: true, dns.TypeHTTPS: true, dns.TypeSVCB: true,
}

// ServeDNS answers one query.
func (r *Resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	start := time.Now()
	rec := audit.Record{Kind: audit.KindDNS, Node: r.cfg.Node}
	if ap, err := netip.ParseAddrPort(w.RemoteAddr().String()); err == nil {
		rec.Source = ap.Addr().Unmap().String()
	}
	resp := r.answer(req, &rec)
	rec.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	qtype := rec.QType
	if _, known := allowedTypes[dns.StringToType[qtype]]; !known && qtype != "TXT" && qtype != "ANY" {
		qtype = "other" // bounded label values
	}
	r.metrics.query(string(rec.Decision), rec.Rule, qtype)
	if err := r.cfg.Audit.Write(context.Background(), rec); err != nil {
		// Never answer what cannot be recorded.
		resp = refusal(req, dns.ExtendedErrorCodeProhibited, "audit trail unavailable")
	}
	w.WriteMsg(resp)
}

func (r *Resolver) answer(req *dns.Msg, rec *audit.Record) *dns.Msg {
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, RuleMalformed, "not exactly one standard query"
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeFormatError)
		return m
	}
	q := req.Question[0]
	rec.QName, rec.QType = q.Name, dns.TypeToString[q.Qtype]
	deny := func(rule, reason string, code uint16) *dns.Msg {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, rule, reason
		return refusal(req, code, reason)
	}
	if c, ok := r.cfg.Audit.(audit.Checker); ok {
		if err := c.Err(); err != nil {
			return deny(RuleAuditDown, err.Error(), dns.ExtendedErrorCodeProhibited)
		}
	}
	src, err := netip.ParseAddr(rec.Source)
	if err != nil {
		return deny(RuleMalformed, "unreadable source address", dns.ExtendedErrorCodeProhibited)
	}
	b, err := r.cfg.Bindings.Lookup(context.Background(), src)
	if err != nil {
		if errors.Is(err, binding.ErrUnknown) {
			return deny(RuleNoLease, err.Error(), dns.ExtendedErrorCodeProhibited)
		}
		return deny(RuleStoreDown, err.Error(), dns.ExtendedErrorCodeProhibited)
	}
	rec.Lease, rec.Task, rec.Tenant, rec.Sandbox = b.Lease, b.Task, b.Tenant, b.Sandbox
	name, err := scope.CanonicalHost(q.Name)
	if err != nil {
		return deny(RuleMalformed, fmt.Sprintf("name %q is not a valid host name", q.Name), dns.ExtendedErrorCodeBlocked)
	}
	if _, ok := b.Scopes.AllowsName(name); !ok {
		return deny(RuleScopeMiss, fmt.Sprintf("task %s has no scope for %s", b.Task, name), dns.ExtendedErrorCodeBlocked)
	}
	if !allowedTypes[q.Qtype] {
		return deny(RuleQType, fmt.Sprintf("query type %s is not answered for sandboxes", rec.QType), dns.ExtendedErrorCodeBlocked)
	}
	if a, ok := (*r.pins.Load())[name]; ok {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		if (q.Qtype == dns.TypeA && a.Is4()) || (q.Qtype == dns.TypeAAAA && a.Is6()) {
			hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 60}
			if a.Is4() {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
			} else {
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
			}
		}
		rec.Decision, rec.Rule, rec.Answers = audit.Allow, RuleScope, len(m.Answer)
		rec.Reason = "pinned private upstream"
		return m
	}
	resp, err := r.forward(req)
	if err != nil {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, RuleUpstream, err.Error()
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		return m
	}
	for _, rr := range resp.Answer {
		var ip net.IP
		switch v := rr.(type) {
		case *dns.A:
			ip = v.A
		case *dns.AAAA:
			ip = v.AAAA
		}
		if a, ok := netip.AddrFromSlice(ip); ok && !scope.IsPublicAddr(a) {
			return deny(RuleRebinding, fmt.Sprintf("%s resolved to the non-public address %s", name, a.Unmap()), dns.ExtendedErrorCodeFiltered)
		}
	}
	resp.Id = req.Id
	rec.Decision, rec.Rule, rec.Answers = audit.Allow, RuleScope, len(resp.Answer)
	return resp
}

func (r *Resolver) forward(req *dns.Msg) (*dns.Msg, error) {
	if len(r.cfg.Upstreams) == 0 {
		return nil, errors.New("no upstream resolvers configured")
	}
	out := req.Copy()
	var last error
	for _, u := range r.cfg.Upstreams {
		resp, rtt, err := r.client.Exchange(out, u)
		if err == nil {
			r.metrics.upstreamTook(rtt)
			return resp, nil
		}
		last = err
	}
	return nil, fmt.Errorf("upstream resolvers failed: %v", last)
}

// refusal is REFUSED with an extended DNS error (RFC 8914) carrying the reason.
func refusal(req *dns.Msg, code uint16, reason string) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeRefused)
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	opt.SetUDPSize(dns.DefaultMsgSize)
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: strings.ToValidUTF8(reason, "?")})
	m.Extra = append(m.Extra, opt)
	return m
}

// Serve answers on addr over UDP and TCP until ctx ends, calling ready (if not nil) once both
// listen.
func (r *Resolver) Serve(ctx context.Context, addr string, ready func()) error {
	udp := &dns.Server{Addr: addr, Net: "udp", Handler: r}
	tcp := &dns.Server{Addr: addr, Net: "tcp", Handler: r, ReadTimeout: 5 * time.Second}
	started := make(chan error, 2)
	udp.NotifyStartedFunc = func() { started <- nil }
	tcp.NotifyStartedFunc = func() { started <- nil }
	errs := make(chan error, 2)
	go func() { errs <- udp.ListenAndServe() }()
	go func() { errs <- tcp.ListenAndServe() }()
	for range 2 {
		select {
		case err := <-errs:
			udp.Shutdown()
			tcp.Shutdown()
			return fmt.Errorf("dnsfilter: listen %s: %w", addr, err)
		case <-started:
		}
	}
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	udp.ShutdownContext(context.Background())
	tcp.ShutdownContext(context.Background())
	return nil
}
