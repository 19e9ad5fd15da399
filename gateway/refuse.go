package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/gateway/broker"
)

// Rule names: the fixed vocabulary of audit records and metric labels.
const (
	RuleScope            = "scope"             // allowed by a task scope
	RuleNoLease          = "no-lease"          // the source address holds no live lease
	RuleStoreDown        = "lease-store-down"  // the lease store cannot be asked
	RuleScopeMiss        = "scope-miss"        // no scope covers the destination
	RuleHostMismatch     = "host-mismatch"     // CONNECT host, SNI and Host disagree
	RuleBadRequest       = "bad-request"       // malformed or ambiguous request
	RulePrivateAddress   = "private-address"   // the destination resolves to a non-public address
	RuleCredentialDenied = "credential-denied" // the catalog forbids the credential here
	RuleCredentialDown   = "credential-unavailable"
	RuleAuditDown        = "audit-unavailable" // the decision could not be recorded
	RuleUpstreamFailed   = "upstream-failed"
	RuleBudget           = "budget" // the lease spent its request or byte budget
	RuleBodyTooLarge     = "body-too-large"
	// RuleAmbiguousPath: the request path has a form that servers read differently (dot
	// segments, //, encoded / . \, an empty path), so what a scope checked might not be what
	// the upstream serves.
	RuleAmbiguousPath = "ambiguous-path"
	// RuleCleartextCredential: the request would carry a credential over plain HTTP.
	RuleCleartextCredential = "cleartext-credential"
	// RuleUnscrubbable: a response to a request that carried a credential could not be
	// checked for it (an upgraded stream, a content coding the gateway cannot undo).
	RuleUnscrubbable = "unscrubbable"
	// RuleTunnel: a name under a wildcard scope looks like data leaving (see package exfil);
	// the resolver refuses such names under the same rule.
	RuleTunnel = "tunnel"
)

// Refusal is a decision to deny, with the status it maps to and words an operator understands.
type Refusal struct {
	Status int
	Rule   string
	Reason string
	// Hint says what would allow the request, when there is something to say.
	Hint string
	// Flagged marks a refusal a security reviewer should look at (data leaving in a name).
	Flagged bool
	Err     error
}

func (r *Refusal) Error() string { return r.Rule + ": " + r.Reason }
func (r *Refusal) Unwrap() error { return r.Err }

func refuse(status int, rule, reason, hint string) *Refusal {
	return &Refusal{Status: status, Rule: rule, Reason: reason, Hint: hint}
}

// refusalFor maps an error to the refusal the sandbox sees; the one place errors become statuses:
// 407 no lease, 403 not allowed, 502 upstream failed, 503 a dependency is down.
func refusalFor(err error) *Refusal {
	var r *Refusal
	switch {
	case errors.As(err, &r):
		return r
	case errors.Is(err, binding.ErrUnknown):
		return &Refusal{Status: http.StatusProxyAuthRequired, Rule: RuleNoLease, Reason: err.Error(), Err: err,
			Hint: "lease a sandbox through airlock; traffic from anything else is refused"}
	case errors.Is(err, binding.ErrUnavailable):
		return &Refusal{Status: http.StatusServiceUnavailable, Rule: RuleStoreDown, Reason: err.Error(), Err: err}
	case errors.Is(err, broker.ErrCleartext):
		return &Refusal{Status: http.StatusForbidden, Rule: RuleCleartextCredential, Reason: err.Error(), Err: err,
			Hint: "use https://, or have the operator list the port in the credential's plain_http_ports"}
	case errors.Is(err, broker.ErrNotAllowed):
		return &Refusal{Status: http.StatusForbidden, Rule: RuleCredentialDenied, Reason: err.Error(), Err: err,
			Hint: "the operator's credential catalog decides where a credential may go"}
	case errors.Is(err, broker.ErrUnavailable):
		return &Refusal{Status: http.StatusServiceUnavailable, Rule: RuleCredentialDown, Reason: err.Error(), Err: err}
	case errors.Is(err, audit.ErrUnavailable):
		return &Refusal{Status: http.StatusServiceUnavailable, Rule: RuleAuditDown, Reason: err.Error(), Err: err}
	default:
		return &Refusal{Status: http.StatusBadGateway, Rule: RuleUpstreamFailed, Reason: err.Error(), Err: err}
	}
}

// write sends the refusal as a short plain-text body, or JSON when the client asks for it.
func (r *Refusal) write(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	h.Set("X-Airlock-Rule", r.Rule)
	// Clients that hide a failed CONNECT's body (curl does) still show headers with -v.
	h.Set("X-Airlock-Reason", strings.ToValidUTF8(strings.ReplaceAll(r.Reason, "\n", " "), "?"))
	h.Set("Cache-Control", "no-store")
	if r.Status == http.StatusProxyAuthRequired {
		h.Set("Proxy-Authenticate", `Bearer realm="airlock"`)
	}
	if strings.Contains(req.Header.Get("Accept"), "application/json") {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(r.Status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": r.Rule, "message": r.Reason, "hint": r.Hint}})
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(r.Status)
	fmt.Fprintf(w, "airlock: denied by rule %s: %s\n", r.Rule, r.Reason)
	if r.Hint != "" {
		fmt.Fprintf(w, "to allow it: %s\n", r.Hint)
	}
}
