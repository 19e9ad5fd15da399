package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/rule"
)

// Refusal is a decision to deny, with the status it maps to and words an operator understands.
type Refusal struct {
	Status int
	Rule   rule.Rule
	// Reason is what the sandbox is told and the record keeps.
	Reason string
	// Detail is what the record keeps after the reason and the sandbox is never told: the
	// non-public addresses a name resolved to (what the resolver refuses to say), a
	// dependency's own error (the address of the lease store, of Vault, a file of the trail).
	Detail string
	// Hint says what would allow the request, when there is something to say.
	Hint string
	// Flagged marks a refusal a security reviewer should look at (data leaving in a name).
	Flagged bool
	Err     error
	// respond, when set, writes the answer in the client's own protocol (a refused git push
	// as receive-pack's report, which git shows per ref) instead of the plain refusal.
	respond func(http.ResponseWriter)
}

func (r *Refusal) Error() string { return r.Rule.String() + ": " + r.recorded() }

// recorded is the refusal's reason as the record keeps it: the reason, then the detail.
func (r *Refusal) recorded() string {
	if r.Detail == "" {
		return r.Reason
	}
	return r.Reason + ": " + r.Detail
}
func (r *Refusal) Unwrap() error { return r.Err }

func refuse(status int, r rule.Rule, reason, hint string) *Refusal {
	return &Refusal{Status: status, Rule: r, Reason: reason, Hint: hint}
}

// refusalFor maps an error to the refusal the sandbox sees; the one place errors become statuses:
// 407 no lease, 403 not allowed, 502 upstream failed, 503 a dependency is down.
func refusalFor(err error) *Refusal {
	var r *Refusal
	switch {
	case errors.As(err, &r):
		return r
	case errors.Is(err, binding.ErrUnknown):
		return &Refusal{Status: http.StatusProxyAuthRequired, Rule: rule.NoLease, Reason: err.Error(), Err: err,
			Hint: "lease a sandbox through airlock; traffic from anything else is refused"}
	case errors.Is(err, binding.ErrUnavailable):
		return &Refusal{Status: http.StatusServiceUnavailable, Rule: rule.StoreDown, Reason: "the lease store is unavailable",
			Detail: err.Error(), Err: err}
	case errors.Is(err, broker.ErrCleartext):
		return &Refusal{Status: http.StatusForbidden, Rule: rule.CleartextCredential, Reason: err.Error(), Err: err,
			Hint: "use https://, or have the operator list the port in the credential's plain_http_ports"}
	case errors.Is(err, broker.ErrNotAllowed):
		return &Refusal{Status: http.StatusForbidden, Rule: rule.CredentialDenied, Reason: err.Error(), Err: err,
			Hint: "the operator's credential catalog decides where a credential may go"}
	case errors.Is(err, broker.ErrUnavailable):
		return &Refusal{Status: http.StatusServiceUnavailable, Rule: rule.CredentialDown, Reason: "the credential store is unavailable",
			Detail: err.Error(), Err: err}
	case errors.Is(err, audit.ErrUnavailable):
		return &Refusal{Status: http.StatusServiceUnavailable, Rule: rule.AuditDown, Reason: "the audit trail cannot take records",
			Detail: err.Error(), Err: err}
	default:
		return &Refusal{Status: http.StatusBadGateway, Rule: rule.UpstreamFailed, Reason: err.Error(), Err: err}
	}
}

// header sets the refusal's headers on h: the rule and the reason (clients that hide a refused
// CONNECT's body, as curl does, still show headers with -v), never cached, and the body's type.
func (r *Refusal) header(h http.Header, asJSON bool) {
	r.tag(h)
	h.Set("Cache-Control", "no-store")
	if r.Status == http.StatusProxyAuthRequired {
		h.Set("Proxy-Authenticate", `Bearer realm="airlock"`)
	}
	if asJSON {
		h.Set("Content-Type", "application/json")
	} else {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	}
}

// tag names the rule and the reason in headers.
func (r *Refusal) tag(h http.Header) {
	h.Set("X-Airlock-Rule", r.Rule.String())
	h.Set("X-Airlock-Reason", strings.ToValidUTF8(strings.ReplaceAll(r.Reason, "\n", " "), "?"))
}

// body is the refusal's body: a short plain text, or JSON when the client asks for it.
func (r *Refusal) body(asJSON bool) []byte {
	if asJSON {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": r.Rule.String(), "message": r.Reason, "hint": r.Hint}})
		return append(b, '\n')
	}
	s := fmt.Sprintf("airlock: denied by rule %s: %s\n", r.Rule, r.Reason)
	if r.Hint != "" {
		s += fmt.Sprintf("to allow it: %s\n", r.Hint)
	}
	return []byte(s)
}

// write sends the refusal through w.
func (r *Refusal) write(w http.ResponseWriter, asJSON bool) {
	if r.respond != nil {
		r.tag(w.Header())
		r.respond(w)
		return
	}
	r.header(w.Header(), asJSON)
	w.WriteHeader(r.Status)
	w.Write(r.body(asJSON))
}

// writeRaw writes the refusal as a whole HTTP/1.1 response, for a connection net/http is not
// serving (a request refused for its framing before it was parsed); the connection closes after.
func (r *Refusal) writeRaw(w io.Writer) error {
	h := http.Header{}
	r.header(h, false)
	b := r.body(false)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Connection", "close")
	var out bytes.Buffer
	fmt.Fprintf(&out, "HTTP/1.1 %d %s\r\n", r.Status, http.StatusText(r.Status))
	h.Write(&out)
	out.WriteString("\r\n")
	out.Write(b)
	_, err := w.Write(out.Bytes())
	return err
}
