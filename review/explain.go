package review

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/suggest"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// row is one record as a view shows it: what happened in a line, and why.
type row struct {
	R audit.Record
	// What is the record in a line: the request, the question, the command, the file.
	What string
	// Why is the decision's explanation: the rule and its reason, or what allowed it.
	Why string
	// Allowing says what would have allowed a denial (a scope to grant, a setting to change),
	// or that nothing in policy would (a malformed request).
	Allowing string
	// Related points at the records this one goes with in the same page: the lookup before a
	// connection, the connection after a lookup.
	Related string
}

func newRow(r audit.Record) row {
	x := row{R: r, What: what(r)}
	switch r.Decision {
	case audit.Deny:
		x.Why = "denied: " + r.Reason
		x.Allowing = allowing(r)
	case audit.Allow:
		x.Why = "allowed"
		if r.Reason != "" {
			x.Why += ": " + r.Reason
		}
		if r.Credential != "" {
			x.Why += "; the gateway added credential " + r.Credential
		}
	default:
		x.Why = r.Reason
	}
	return x
}

// what says what a record describes, in a line.
func what(r audit.Record) string {
	switch r.Kind {
	case audit.KindHTTP:
		s := fmt.Sprintf("%s %s:%d%s", r.Method, r.Host, r.Port, r.Path)
		switch r.Event {
		case "open":
			s = fmt.Sprintf("tunnel to %s:%d opened (not inspected)", r.Host, r.Port)
		case "close":
			s = fmt.Sprintf("tunnel to %s:%d closed", r.Host, r.Port)
		}
		if r.Status != 0 {
			s += fmt.Sprintf(" → %d", r.Status)
		}
		return s
	case audit.KindDNS:
		s := r.QName + " " + r.QType
		if r.Event == audit.EventGatewayLookup {
			s = "the gateway looked up " + s
		}
		if r.Answers > 0 {
			s += fmt.Sprintf(" (%d answers)", r.Answers)
		}
		return s
	case audit.KindExec:
		s := strings.Join(r.Command, " ")
		if r.Process != "" {
			s = fmt.Sprintf("[%s %s] %s", r.Process, r.Event, s)
		}
		if r.ExitCode != nil {
			s += fmt.Sprintf(" → exit %d", *r.ExitCode)
		}
		return s
	case audit.KindFile:
		s := string(r.Event) + " " + r.Path
		if r.To != "" {
			s += " → " + r.To
		}
		return s
	case audit.KindLease:
		s := string(r.Event)
		if r.Template != "" {
			s += fmt.Sprintf(" (template %s, runtime %s)", r.Template, r.Runtime)
		}
		return s
	case audit.KindAudit:
		if r.Event == EventReviewMark {
			return markWhat(r)
		}
	}
	return string(r.Event)
}

// markWhat says what a review mark's record is: a reviewer key's mark, or a mark the views do not
// count (a tenant's key made it, or it was written before marks said what kind of key made them).
func markWhat(r audit.Record) string {
	of := "lease " + r.Lease
	if r.Lease == "" {
		of = "destination " + r.Host + " for every tenant's traffic"
		if r.Tenant != "" {
			of = "destination " + r.Host + " for tenant " + r.Tenant + "'s traffic"
		}
	}
	if name, ok := reviewerMark(r); ok {
		return of + " marked reviewed by reviewer key " + name
	}
	if t, ok := strings.CutPrefix(r.Reviewer, "tenant:"); ok {
		return "a mark of " + of + " by tenant " + t + "'s API key: not a review (only reviewer keys mark), and no view counts it"
	}
	return "a mark of " + of + " by " + r.Reviewer + " that does not say it came from a reviewer key (written before marks did): no view counts it as a review"
}

// allowing says what would have allowed a denied record: for a destination no scope covered, the
// narrowest scope that would have (the host, the port if not a default one, the method and the
// exact path), as a task token would carry it; for other rules, the setting or practice that
// decides, or that no policy would (a request refused for being malformed).
func allowing(r audit.Record) string {
	switch r.Rule {
	case rule.ScopeMiss, rule.QType:
		sc, ok := suggest.Narrowest(r)
		if !ok {
			return "no scope: the destination is not a name a scope can hold (malformed, or an address)"
		}
		if r.Rule == rule.QType {
			return "a scope that lets the resolver answer this type: " + scopeJSON(sc)
		}
		return "the narrowest scope that would have allowed it: " + scopeJSON(sc)
	case rule.Tunnel:
		return "a scope naming the host exactly: names under a wildcard scope must not carry data"
	case rule.RateLimit:
		return "fewer queries a second from the sandbox, or a higher resolver.rate_qps"
	case rule.CredentialDenied:
		return "the operator's credential catalog lists where each credential may go; this destination is not among them"
	case rule.CleartextCredential:
		return "https://, or the operator listing the port in the credential's plain_http_ports"
	case rule.PrivateAddress:
		return "an operator's gateway.private_upstreams entry pinning the name to the private address"
	case rule.Budget:
		return "a larger request or byte budget for the lease (gateway.budget)"
	case rule.NoLease:
		return "traffic from a leased sandbox: anything else is refused"
	case rule.HostMismatch, rule.AmbiguousPath, rule.BadRequest, rule.BodyTooLarge:
		return "no policy: the request itself was refused (malformed, ambiguous or oversized); the same destination asked plainly is decided by the scopes"
	case rule.StoreDown, rule.CredentialDown, rule.AuditDown, rule.UpstreamFailed, rule.Unscrubbable:
		return "no policy: a part the decision needs was unavailable or failed; the same request later is decided by the scopes"
	}
	return ""
}

func scopeJSON(sc scope.Scope) string {
	b, _ := json.Marshal(sc)
	return string(b)
}
