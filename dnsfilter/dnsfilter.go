package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/exfil"
	"github.com/airlock-dev/airlock/ratelimit"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// Bindings finds the lease a sandbox address holds; *binding.Cache meets it. Bindings that are
// also a binding.Peeker let a query over its rate be attributed to its lease without a lookup.
type Bindings interface {
	Lookup(ctx context.Context, addr netip.Addr) (binding.Binding, error)
}

// Package binding cannot name this interface (it is imported here), so its implementations are
// guarded beside it.
var (
	_ Bindings = (*binding.Cache)(nil)
	_ Bindings = binding.Static{}
)

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
	// Guard refuses names under wildcard scopes that look like data leaving (see package
	// exfil); the node shares one with its gateway. Nil means one with the default limits.
	Guard *exfil.Guard
	// RateQPS and RateBurst limit queries per source address (default 200 and 400; negative
	// disables).
	RateQPS, RateBurst int
	// Workers bounds concurrent UDP queries (default 8 per CPU).
	Workers int
	Logger  *slog.Logger
	// Now is the clock of the cache, the tunnel window, the rate limit and durations; nil
	// means time.Now.
	Now func() time.Time
}

// Resolver is the DNS handler. Safe for concurrent use.
type Resolver struct {
	cfg     Config
	client  *dns.Client
	tcp     *dns.Client
	log     *slog.Logger
	metrics *Metrics // nil until NewMetrics
	pins    atomic.Pointer[map[string]netip.Addr]
	cache   *answerCache
	guard   *exfil.Guard
	rate    *ratelimit.Limiter[netip.Addr]
	now     func() time.Time // Config.Now
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
	if cfg.Guard == nil {
		cfg.Guard = exfil.New(exfil.Limits{})
	}
	r := &Resolver{
		cfg: cfg, log: cfg.Logger,
		client: &dns.Client{Net: "udp", Timeout: 3 * time.Second, UDPSize: 1232},
		tcp:    &dns.Client{Net: "tcp", Timeout: 3 * time.Second},
		cache:  newAnswerCache(cfg.CacheMaxTTL, cfg.CacheNegTTL, cfg.CacheEntries),
		guard:  cfg.Guard,
		now:    cfg.Now,
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.rate = ratelimit.New[netip.Addr](cfg.RateQPS, cfg.RateBurst).Clock(func() time.Time { return r.now() })
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
	var src netip.Addr
	if ap, err := netip.ParseAddrPort(w.RemoteAddr().String()); err == nil {
		src = ap.Addr().Unmap()
	}
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	w.WriteMsg(r.Handle(req, src, udp))
}

// Handle answers req from src and records the decision. udp says whether the answer must fit
// the client's UDP buffer (it is truncated, with TC set, when it does not).
func (r *Resolver) Handle(req *dns.Msg, src netip.Addr, udp bool) *dns.Msg {
	start := r.now()
	rec := r.newRecord(start, src)
	var resp *dns.Msg
	if req.Response || req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 || req.Question[0].Qclass != dns.ClassINET {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, rule.BadRequest, "not exactly one standard IN-class query"
		resp = new(dns.Msg)
		resp.SetRcode(req, dns.RcodeFormatError)
	} else {
		q := req.Question[0]
		name, d := r.admit(src, q.Name, q.Qtype, &rec, start)
		resp = r.respond(req, name, d, &rec)
	}
	return r.seal(req, resp, udp, start, &rec)
}

func (r *Resolver) newRecord(start time.Time, src netip.Addr) audit.Record {
	return audit.Record{Time: start, Kind: audit.KindDNS, Node: r.cfg.Node, Source: src.String()}
}

// seal records the decision and fits the answer to the transport. An answer whose record cannot
// be written is replaced by a refusal: nothing is answered unrecorded.
func (r *Resolver) seal(req, resp *dns.Msg, udp bool, start time.Time, rec *audit.Record) *dns.Msg {
	qtype := uint16(0)
	if len(req.Question) == 1 {
		qtype = req.Question[0].Qtype
	}
	if !r.record(rec, qtype, start) {
		resp = r.unrecorded(req)
	}
	r.finish(req, resp, udp)
	return resp
}

// unrecorded is the answer to a query whose record the trail did not take.
func (r *Resolver) unrecorded(req *dns.Msg) *dns.Msg {
	return r.refusal(req, dns.ExtendedErrorCodeProhibited, rule.AuditDown, "the audit trail cannot take records")
}

// record completes rec with its duration, counts it and writes it; false means the trail did not
// take it and the query must be refused.
func (r *Resolver) record(rec *audit.Record, qtype uint16, start time.Time) bool {
	rec.DurationMS = float64(r.now().Sub(start).Microseconds()) / 1000
	r.metrics.query(string(rec.Decision), rec.Rule.String(), metricType(qtype))
	if err := r.cfg.Audit.Write(context.Background(), *rec); err != nil {
		r.metrics.auditRefused()
		return false
	}
	return true
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

// metricType is the query type as a metric label: the types sandboxes ask for by name, every
// other type as "other", so the label's values stay bounded.
func metricType(t uint16) string {
	switch t {
	case dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeTXT, dns.TypeANY, dns.TypeNULL:
		return typeName(t)
	}
	return "other"
}

func typeName(t uint16) string {
	switch t { // the common ones without a map lookup
	case dns.TypeA:
		return "A"
	case dns.TypeAAAA:
		return "AAAA"
	case dns.TypeHTTPS:
		return "HTTPS"
	}
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// denial is why a query is refused; the zero value means it is not. The sandbox is told the
// reason (the EDE text); the record keeps the reason and the detail. Security: the detail is
// what the sandbox must not learn from a refusal (the non-public address a public name resolved
// to, an error from the lease store or the trail naming their addresses and files), so it never
// goes into the answer.
type denial struct {
	rule   rule.Rule
	reason string
	detail string
	code   uint16 // extended DNS error (RFC 8914)
}

// recorded is the denial's reason as the trail keeps it: the reason, then the detail.
func (d denial) recorded() string {
	if d.detail == "" {
		return d.reason
	}
	return d.reason + ": " + d.detail
}

// admit applies what every query must pass before it is answered: the trail can take its record,
// the source is under its rate and holds a lease, the name is valid and in the lease's scopes, the
// type is answered, and under a wildcard the name does not look like a tunnel. It fills rec's
// question and lease fields and returns the canonical name.
func (r *Resolver) admit(src netip.Addr, qname string, qtype uint16, rec *audit.Record, now time.Time) (string, denial) {
	rec.QName, rec.QType = qname, typeName(qtype)
	if err := audit.Check(r.cfg.Audit); err != nil {
		r.metrics.auditRefused()
		return "", denial{rule: rule.AuditDown, reason: "the audit trail cannot take records", detail: err.Error(), code: dns.ExtendedErrorCodeProhibited}
	}
	if !src.IsValid() {
		return "", denial{rule: rule.BadRequest, reason: "unreadable source address", code: dns.ExtendedErrorCodeProhibited}
	}
	if !r.rate.Allow(src) {
		// Attributed from the cache alone (no store lookup for a flood), so the lease's own
		// trail, receipt and denial count show what it was refused.
		if p, ok := r.cfg.Bindings.(binding.Peeker); ok {
			if b, ok := p.Peek(src); ok {
				rec.Lease, rec.Task, rec.Tenant, rec.Sandbox = b.Lease, b.Task, b.Tenant, b.Sandbox
			}
		}
		return "", denial{rule: rule.RateLimit, reason: "too many queries from this sandbox", code: dns.ExtendedErrorCodeProhibited}
	}
	b, err := r.cfg.Bindings.Lookup(context.Background(), src)
	if err != nil {
		if errors.Is(err, binding.ErrUnknown) {
			return "", denial{rule: rule.NoLease, reason: "no lease holds this sandbox's address", detail: err.Error(), code: dns.ExtendedErrorCodeProhibited}
		}
		return "", denial{rule: rule.StoreDown, reason: "the lease store is unavailable", detail: err.Error(), code: dns.ExtendedErrorCodeProhibited}
	}
	rec.Lease, rec.Task, rec.Tenant, rec.Sandbox = b.Lease, b.Task, b.Tenant, b.Sandbox
	name, err := scope.CanonicalHost(qname)
	if err != nil {
		return "", denial{rule: rule.BadRequest, reason: fmt.Sprintf("name %q is not a valid host name", qname), code: dns.ExtendedErrorCodeBlocked}
	}
	s, ok := b.Scopes.AllowsName(name)
	if !ok {
		return "", denial{rule: rule.ScopeMiss, reason: fmt.Sprintf("task %s has no scope for %s", b.Task, name), code: dns.ExtendedErrorCodeBlocked}
	}
	if !allowedTypes[qtype] && !slices.Contains(s.DNSTypes, rec.QType) {
		return "", denial{rule: rule.QType, reason: fmt.Sprintf("query type %s is not answered for sandboxes unless a scope lists it in dns_types", rec.QType), code: dns.ExtendedErrorCodeBlocked}
	}
	if apex, ok := strings.CutPrefix(s.Host, "*."); ok {
		// Under a wildcard the task chooses the names: guard against data encoded in them.
		if reason := r.guard.Check(b.Lease, apex, name, now); reason != "" {
			rec.Flagged = true
			return "", denial{rule: rule.Tunnel, reason: reason, code: dns.ExtendedErrorCodeBlocked}
		}
	}
	return name, denial{}
}

// respond answers an admitted query (pinned, cached or forwarded), or refuses it with d.
func (r *Resolver) respond(req *dns.Msg, name string, d denial, rec *audit.Record) *dns.Msg {
	deny := func(d denial) *dns.Msg {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, d.rule, d.recorded()
		return r.refusal(req, d.code, d.rule, d.reason)
	}
	if d.rule != "" {
		return deny(d)
	}
	q := req.Question[0]
	if a, ok := r.pinned(name); ok {
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
		rec.Decision, rec.Rule, rec.Answers = audit.Allow, rule.Scope, len(m.Answer)
		rec.Reason = "pinned private upstream"
		return m
	}
	resp, cached, err := r.lookup(req)
	if err != nil {
		rec.Decision, rec.Rule, rec.Reason = audit.Deny, rule.UpstreamFailed, err.Error()
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		return m
	}
	// Rebinding defence: every address in the answer, CNAME chain included, must be public.
	if a, ok := firstPrivate(resp); ok {
		return deny(denial{rule: rule.PrivateAddress, reason: fmt.Sprintf("%s resolved to a non-public address", name), detail: a.String(), code: dns.ExtendedErrorCodeFiltered})
	}
	resp.Id = req.Id
	resp.Question = req.Question // the client's spelling (0x20 case) back
	rec.Decision, rec.Rule, rec.Answers = audit.Allow, rule.Scope, len(resp.Answer)
	if cached {
		rec.Reason = "cached"
	}
	return resp
}

func (r *Resolver) pinned(name string) (netip.Addr, bool) {
	a, ok := (*r.pins.Load())[name]
	return a, ok
}

// firstPrivate returns the first non-public address anywhere in m: A and AAAA records in every
// section (answer, authority, additional), and the ipv4hint and ipv6hint of HTTPS and SVCB
// records. A sandbox must get no private address for a public name, whatever record carries it.
func firstPrivate(m *dns.Msg) (netip.Addr, bool) {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if a, ok := privateIn(rr); ok {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// privateIn returns a non-public address that rr carries, if any.
func privateIn(rr dns.RR) (netip.Addr, bool) {
	check := func(ips ...net.IP) (netip.Addr, bool) {
		for _, ip := range ips {
			if a, ok := netip.AddrFromSlice(ip); ok && !scope.IsPublicAddr(a.Unmap()) {
				return a.Unmap(), true
			}
		}
		return netip.Addr{}, false
	}
	var svcb *dns.SVCB
	switch v := rr.(type) {
	case *dns.A:
		return check(v.A)
	case *dns.AAAA:
		return check(v.AAAA)
	case *dns.SVCB:
		svcb = v
	case *dns.HTTPS:
		svcb = &v.SVCB
	default:
		return netip.Addr{}, false
	}
	for _, kv := range svcb.Value {
		switch h := kv.(type) {
		case *dns.SVCBIPv4Hint:
			if a, ok := check(h.Hint...); ok {
				return a, true
			}
		case *dns.SVCBIPv6Hint:
			if a, ok := check(h.Hint...); ok {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// lookup answers from the cache, or asks upstream once for all identical queries in flight.
func (r *Resolver) lookup(req *dns.Msg) (*dns.Msg, bool, error) {
	k := keyOf(req.Question[0])
	if m := r.cache.get(k, r.now()); m != nil {
		r.metrics.cacheHit(true)
		return m, true, nil
	}
	r.metrics.cacheHit(false)
	v, err, _ := r.cache.flight.Do(fmt.Sprintf("%s/%d/%d", k.name, k.qtype, k.qclass), func() (any, error) {
		m, err := r.forward(req.Question[0])
		if err != nil {
			return nil, err
		}
		r.cache.put(k, m, r.now())
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
// (RFC 8914) carrying the rule and the reason the sandbox may be told (a denial's reason, never
// its detail).
func (r *Resolver) refusal(req *dns.Msg, code uint16, ru rule.Rule, reason string) *dns.Msg {
	m := new(dns.Msg)
	rcode := dns.RcodeRefused
	if r.cfg.NXDomain && code == dns.ExtendedErrorCodeBlocked {
		rcode = dns.RcodeNameError
	}
	m.SetRcode(req, rcode)
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	opt.SetUDPSize(1232)
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: strings.ToValidUTF8(ru.String()+": "+reason, "?")})
	m.Extra = append(m.Extra, opt)
	return m
}
