package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/gateway/audit"
	"github.com/airlock-dev/airlock/gateway/binding"
	"github.com/airlock-dev/airlock/gateway/scope"
	"github.com/airlock-dev/airlock/ratelimit"
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
	RuleTunnel    = "tunnel"
	RuleRate      = "rate-limit"
)

// Bindings finds the lease a sandbox address holds; *binding.Cache meets it.
type Bindings interface {
	Lookup(ctx context.Context, addr netip.Addr) (binding.Binding, error)
}

// Config is what a Resolver needs. Zero values take the documented defaults.
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
	// NXDomain answers refused names with NXDOMAIN instead of REFUSED (the extended error
	// still says Blocked).
	NXDomain bool
	// CacheMaxTTL caps how long an answer is cached (default 5m); CacheNegTTL caps negative
	// answers (default 30s); CacheEntries bounds the cache (default 100000).
	CacheMaxTTL  time.Duration
	CacheNegTTL  time.Duration
	CacheEntries int
	Tunnel       TunnelLimits
	// RateQPS and RateBurst limit queries per source address (default 200 and 400; negative
	// disables).
	RateQPS, RateBurst int
	// Workers bounds concurrent UDP queries (default 8 per CPU).
	Workers int
	Logger  *slog.Logger
}

// Resolver is the DNS handler. Safe for concurrent use.
type Resolver struct {
	cfg      Config
	client   *dns.Client
	tcp      *dns.Client
	log      *slog.Logger
	metrics  *Metrics // nil until NewMetrics
	pins     atomic.Pointer[map[string]netip.Addr]
	cache    *answerCache
	tunnel   TunnelLimits
	distinct *distinctNames
	rate     *ratelimit.Limiter[netip.Addr]
}

// New returns a Resolver.
func New(cfg Config) *Resolver {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CacheMaxTTL == 0 {
		cfg.CacheMaxTTL = 5 * time.Minute
	}
	if cfg.CacheNegTTL == 0 {
		cfg.CacheNegTTL = 30 * time.Second
	}
	if cfg.CacheEntries == 0 {
		cfg.CacheEntries = 100000
	}
	if cfg.RateQPS == 0 {
		cfg.RateQPS, cfg.RateBurst = 200, 400
	}
	t := cfg.Tunnel.withDefaults()
	r := &Resolver{
		cfg: cfg, log: cfg.Logger,
		client:   &dns.Client{Net: "udp", Timeout: 3 * time.Second, UDPSize: 1232},
		tcp:      &dns.Client{Net: "tcp", Timeout: 3 * time.Second},
		cache:    newAnswerCache(cfg.CacheMaxTTL, cfg.CacheNegTTL, cfg.CacheEntries),
		tunnel:   t,
		distinct: newDistinctNames(t.MaxDistinct, t.Window),
	}
	r.rate = ratelimit.New[netip.Addr](cfg.RateQPS, cfg.RateBurst)
	r.SetPins(cfg.Pins)
	return r
}

// SetPins replaces the pinned private names (see Config.Pins).
func (r *Resolver) SetPins(pins map[string]netip.Addr) { r.pins.Store(&pins) }

var allowedTypes = map[uint16]bool{
	dns.TypeA: true, dns.TypeAAAA: true, dns.TypeCNAME: true, dns.TypeHTTPS: true, dns.TypeSVCB: true,
}

// ServeDNS answers one query (the TCP path; UDP is served by Serve's own workers).
func (r *Resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	src := netip.Addr{}
	if ap, err := netip.ParseAddrPort(w.RemoteAddr().String()); err == nil {
		src = ap.Addr().Unmap()
	}
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	w.WriteMsg(r.Handle(req, src, udp))
}

// Handle answers req from src and records the decision. udp says whether the answer must fit
// the client's UDP buffer (it is truncated, with TC set, when it does not).
func (r *Resolver) Handle(req *dns.Msg, src netip.Addr, udp bool) *dns.Msg {
	start := time.Now()
	rec := audit.Record{Kind: audit.KindDNS, Node: r.cfg.Node, Source: src.String()}
	resp := r.answer(req, &rec)
	rec.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	r.metrics.query(string(rec.Decision), rec.Rule, metricType(rec.QType))
	if err := r.cfg.Audit.Write(context.Background(), rec); err != nil {
		// Never answer what cannot be recorded.
		r.metrics.auditRefused()
		resp = r.refusal(req, dns.ExtendedErrorCodeProhibited, "audit trail unavailable")
	}
	r.finish(req, resp, udp)
	return resp
}

// finish adds EDNS to the answer when the query had it and fits the answer to UDP.
func (r *Resolver) finish(req, resp *dns.Msg, udp bool) {
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = int(max(opt.UDPSize(), dns.MinMsgSize))
		if resp.IsEdns0() == nil {
			resp.SetEdns0(1232, opt.Do())
		}
	}
	resp.Compress = true
	if udp {
		resp.Truncate(min(size, 1232))
	}
}

func metricType(t string) string {
	if v, ok := dns.StringToType[t]; ok && (allowedTypes[v] || v == dns.TypeTXT || v == dns.TypeANY || v == dns.TypeNULL) {
		return t
	}
	return "other" // bounded label values
}

func (r *Resolver) answer(req *dns.Msg, rec *audit.Record) *dns.Msg {
	if req.Response || req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 || req.Question[0].Qclass != dns.ClassINET {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, RuleMalformed, "not exactly one standard IN-class query"
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeFormatError)
		return m
	}
	q := req.Question[0]
	rec.QName, rec.QType = q.Name, dns.TypeToString[q.Qtype]
	if rec.QType == "" {
		rec.QType = fmt.Sprintf("TYPE%d", q.Qtype)
	}
	deny := func(rule, reason string, code uint16) *dns.Msg {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, rule, reason
		return r.refusal(req, code, reason)
	}
	if c, ok := r.cfg.Audit.(audit.Checker); ok {
		if err := c.Err(); err != nil {
			r.metrics.auditRefused()
			return deny(RuleAuditDown, err.Error(), dns.ExtendedErrorCodeProhibited)
		}
	}
	src, err := netip.ParseAddr(rec.Source)
	if err != nil {
		return deny(RuleMalformed, "unreadable source address", dns.ExtendedErrorCodeProhibited)
	}
	if !r.rate.Allow(src) {
		return deny(RuleRate, "too many queries from this sandbox", dns.ExtendedErrorCodeProhibited)
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
	s, ok := b.Scopes.AllowsName(name)
	if !ok {
		return deny(RuleScopeMiss, fmt.Sprintf("task %s has no scope for %s", b.Task, name), dns.ExtendedErrorCodeBlocked)
	}
	if !allowedTypes[q.Qtype] && !slices.Contains(s.DNSTypes, rec.QType) {
		return deny(RuleQType, fmt.Sprintf("query type %s is not answered for sandboxes unless a scope lists it in dns_types", rec.QType), dns.ExtendedErrorCodeBlocked)
	}
	if apex, ok := strings.CutPrefix(s.Host, "*."); ok {
		// Under a wildcard the task chooses the names: guard against data encoded in them.
		if reason := r.tunnel.shape(name); reason != "" {
			rec.Flagged = true
			return deny(RuleTunnel, fmt.Sprintf("%s refused: %s", name, reason), dns.ExtendedErrorCodeBlocked)
		}
		if r.distinct.seen(b.Lease, apex, name) {
			rec.Flagged = true
			return deny(RuleTunnel, fmt.Sprintf("lease %s looked up more than %d distinct names under %s in %s", b.Lease, r.tunnel.MaxDistinct, apex, r.tunnel.Window), dns.ExtendedErrorCodeBlocked)
		}
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
	resp, cached, err := r.lookup(req)
	if err != nil {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, RuleUpstream, err.Error()
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		return m
	}
	// Rebinding defence: every address in the answer, CNAME chain included, must be public.
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
	resp.Question = req.Question // the client's spelling (0x20 case) back
	rec.Decision, rec.Rule, rec.Answers = audit.Allow, RuleScope, len(resp.Answer)
	if cached {
		rec.Reason = "cached"
	}
	return resp
}

// lookup answers from the cache, or asks upstream once for all identical queries in flight.
func (r *Resolver) lookup(req *dns.Msg) (*dns.Msg, bool, error) {
	k := keyOf(req.Question[0])
	if m := r.cache.get(k); m != nil {
		r.metrics.cacheHit(true)
		return m, true, nil
	}
	r.metrics.cacheHit(false)
	v, err, _ := r.cache.flight.Do(fmt.Sprintf("%s/%d/%d", k.name, k.qtype, k.qclass), func() (any, error) {
		m, err := r.forward(req.Question[0])
		if err != nil {
			return nil, err
		}
		r.cache.put(k, m)
		return m, nil
	})
	if err != nil {
		return nil, false, err
	}
	return v.(*dns.Msg).Copy(), false, nil
}

// forward asks the upstream resolvers, over UDP with EDNS and over TCP when the answer was
// truncated.
func (r *Resolver) forward(q dns.Question) (*dns.Msg, error) {
	if len(r.cfg.Upstreams) == 0 {
		return nil, errors.New("no upstream resolvers configured")
	}
	out := new(dns.Msg)
	out.SetQuestion(q.Name, q.Qtype)
	out.Question[0].Qclass = q.Qclass
	out.RecursionDesired = true
	out.SetEdns0(1232, false)
	var last error
	for _, u := range r.cfg.Upstreams {
		resp, rtt, err := r.client.Exchange(out, u)
		if err == nil && resp.Truncated {
			resp, rtt, err = r.tcp.Exchange(out, u)
		}
		if err == nil {
			r.metrics.upstreamTook(rtt)
			resp.Extra = slices.DeleteFunc(resp.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
			return resp, nil
		}
		last = err
	}
	return nil, fmt.Errorf("upstream resolvers failed: %v", last)
}

// refusal is REFUSED (or NXDOMAIN when configured, for name refusals) with an extended DNS error
// (RFC 8914) carrying the reason.
func (r *Resolver) refusal(req *dns.Msg, code uint16, reason string) *dns.Msg {
	m := new(dns.Msg)
	rcode := dns.RcodeRefused
	if r.cfg.NXDomain && code == dns.ExtendedErrorCodeBlocked {
		rcode = dns.RcodeNameError
	}
	m.SetRcode(req, rcode)
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	opt.SetUDPSize(1232)
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: strings.ToValidUTF8(reason, "?")})
	m.Extra = append(m.Extra, opt)
	return m
}
