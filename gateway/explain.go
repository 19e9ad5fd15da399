package gateway

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

var errNoVerifier = fmt.Errorf("%w: this gateway verifies no task tokens", binding.ErrUnknown)

// Explain verifies raw like the gateway does and decides method and rawURL under its scopes and
// the current catalog. It returns an error only for a request it cannot read.
func (p *Proxy) Explain(raw, method, rawURL string) (rule.Explanation, error) {
	if method == "" {
		method = "GET"
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return rule.Explanation{}, fmt.Errorf("%q is not an http or https URL", rawURL)
	}
	ex := rule.Explanation{Method: strings.ToUpper(method), URL: rawURL}
	x := &exchange{}
	def := 443
	if u.Scheme == "http" {
		def = 80
	}
	if err := p.target(x, u.Scheme, u.Host, def); err != nil {
		return rule.Explanation{}, err
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/" // what a client sends for a URL without one
	}
	err = errNoVerifier
	var task token.Task
	if p.cfg.Verify != nil {
		if task, err = p.cfg.Verify(raw); err != nil {
			err = fmt.Errorf("%w: %v", binding.ErrUnknown, err)
		}
	}
	if err == nil {
		x.b = binding.Binding{Task: task.ID, Tenant: task.Tenant, Scopes: task.Scopes}
		ex.Task = task.ID
		if perr := scope.CheckPath(path); perr != nil {
			err = pathRefusal(perr)
		} else {
			err = p.decide(x, ex.Method, path)
		}
	}
	if err != nil {
		ref := refusalFor(err)
		ex.Decision, ex.Rule, ex.Reason, ex.Hint = string(audit.Deny), ref.Rule, ref.Reason, ref.Hint
		return ex, nil
	}
	s := x.scope
	ex.Decision, ex.Rule, ex.Scope = string(audit.Allow), rule.Scope, &s
	ex.Reason = "scope " + s.String()
	if x.entry != nil {
		ex.Credential = x.entry.Name
	}
	ex.Profile = s.Profile
	_, host, port := x.sendTo()
	if x.mirror != nil {
		ex.Mirror = x.mirror.String()
	}
	if ap, ok := p.dyn.Load().pins[hostPort(host, port)]; ok {
		ex.Upstream = "pinned private upstream " + ap.String()
	} else if _, err := netip.ParseAddr(host); err == nil {
		ex.Upstream = "the address itself, if public"
	} else {
		ex.Upstream = "resolved by the gateway at dial time; only public addresses are dialed"
	}
	return ex, nil
}
