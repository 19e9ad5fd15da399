package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/rule"
)

// deny is the one way a refusal leaves the gateway: it is written to the sandbox (its reason
// through the exchange's redaction) and recorded, with what went upstream before it (nothing,
// unless the request was sent: see meter). An exchange the recheck cut is refused for that,
// whatever error the step it was cut in saw (a cancelled lookup, a failed body read): its
// status and rule are the cut's, and if anything reaches the sandbox, it is that.
func (p *Proxy) deny(w http.ResponseWriter, x *exchange, err error) {
	ref := refusalFor(err)
	if why := x.held.cutBy(); why != nil {
		ref = why
	}
	ref.Reason = x.redact(ref.Reason)
	x.refusal, x.status = ref, ref.Status
	x.up = x.meter.n.Load()
	ref.write(w, x.json)
	p.record(x)
}

// redact is the one redaction step for everything the exchange says about itself (refusals sent
// to the sandbox, audit reasons, log lines): every form of a credential it carried is replaced.
func (x *exchange) redact(text string) string {
	switch {
	case x.scrub != nil:
		return x.scrub.scrubString(text)
	case x.secret != nil:
		return broker.Redact(text, x.secret.Values()...)
	}
	return text
}

// record writes the exchange's audit record; an error means the trail did not take it. A
// request's hold (see hold) is released first, so that no cut lands after its record: an
// exchange the recheck cut is recorded as refused (EventCut, a tunnel's close keeping its
// event), with why, whatever the step it was cut in saw (a cancelled round trip, a closed
// connection); its status stays what the sandbox was sent, if anything was (deny, relay).
func (p *Proxy) record(x *exchange) error {
	if x.held.method != "" {
		p.held.release(&x.held) // forward's own release, after, only learns again whether it was cut
	}
	if why := x.held.cutBy(); why != nil {
		x.refusal = why
		if x.event == "" {
			x.event = audit.EventCut
		}
	}
	rec := audit.Record{
		Time: x.start, Kind: audit.KindHTTP, Node: p.cfg.Node,
		Tenant: x.b.Tenant, Lease: x.b.Lease, Task: x.b.Task, Sandbox: x.b.Sandbox, Source: x.src.String(),
		Method: x.method, Host: x.host, Port: x.port, Path: x.path,
		Status: x.status, BytesUp: x.up, BytesDown: x.down, Upstream: x.upstream, Dest: x.dest, Event: x.event,
		DurationMS: float64(time.Since(x.start).Microseconds()) / 1000,
	}
	if x.entry != nil {
		rec.Credential = x.entry.Name
	}
	if x.mirror != nil {
		rec.Mirror = x.mirror.String()
	}
	if x.refusal != nil {
		rec.Decision, rec.Rule, rec.Reason, rec.Flagged = audit.Deny, x.refusal.Rule, x.refusal.recorded(), x.refusal.Flagged
		if x.event == audit.EventCut && x.sent {
			rec.Scopes = []string{x.scope.String()} // what its credential went upstream under
		}
	} else {
		rec.Decision, rec.Rule, rec.Reason = audit.Allow, rule.Scope, "scope "+x.scope.String()
		if x.note != "" {
			rec.Reason += "; " + x.note
		}
	}
	rec.Reason = x.redact(rec.Reason)
	if x.event != audit.EventClose { // a tunnel's decision is counted once, when it opens
		p.metrics.observe(&rec, time.Since(x.start))
	}
	err := p.cfg.Audit.Write(context.Background(), rec)
	if err != nil {
		p.log.Error("audit write failed", "err", x.redact(err.Error()), "lease", x.b.Lease)
	}
	return err
}

// recordLookup records each name lookup the gateway makes for x, as the resolver records the
// sandbox's own: a lookup that cannot be recorded refuses the request.
func (p *Proxy) recordLookup(x *exchange) func(lookup) error {
	return func(l lookup) error {
		rec := audit.Record{Time: time.Now().Add(-l.took), Kind: audit.KindDNS, Event: audit.EventGatewayLookup, Node: p.cfg.Node,
			Tenant: x.b.Tenant, Lease: x.b.Lease, Task: x.b.Task, Sandbox: x.b.Sandbox, Source: x.src.String(),
			QName: l.host, QType: "A+AAAA", Answers: len(l.addrs), Decision: audit.Allow, Rule: rule.Scope,
			Reason:     "looked up by the gateway for " + x.scope.String(),
			DurationMS: float64(l.took.Microseconds()) / 1000}
		if l.err != nil {
			rec.Decision, rec.Rule, rec.Reason = audit.Deny, rule.UpstreamFailed, l.err.Error()
		} else if !slices.ContainsFunc(l.addrs, func(a netip.Addr) bool { return p.dial.allowed(a.Unmap()) }) {
			rec.Decision, rec.Rule, rec.Reason = audit.Deny, rule.PrivateAddress, fmt.Sprintf("resolved only to non-public addresses %v", l.addrs)
		}
		return p.cfg.Audit.Write(context.Background(), rec)
	}
}

// recordFraming records a request refused for its framing (the framing check wrote the refusal
// itself): from remote, or inside the intercepted session that conn, when set, belongs to.
func (p *Proxy) recordFraming(remote string, conn *exchange, reason string) {
	x := &exchange{start: time.Now()}
	if conn != nil {
		x.src, x.b, x.bearer, x.host, x.port, x.scheme = conn.src, conn.b, conn.bearer, conn.host, conn.port, conn.scheme
	} else if err := p.identifyAt(context.Background(), remote, "", x); err != nil {
		x.src = addrOf(remote)
	}
	x.refusal = refuse(http.StatusBadRequest, rule.BadRequest, reason, "")
	x.status = http.StatusBadRequest
	p.record(x)
}
