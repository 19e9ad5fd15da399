package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// grant is what a lease's scopes allow towards one destination: the scope that decided it (the
// first, in the token's order, that covers the destination) and, when the operator mirrors the
// destination, the server its traffic goes to instead.
type grant struct {
	scope  scope.Scope
	mirror *Mirror // nil: the destination itself
}

// allow is the one place the gateway matches a destination against a lease's scopes, and the one
// place it looks up a mirror: a CONNECT, a redirected TLS connection, the recheck of a held
// connection and every request (forward and Explain) are decided by it, so what opens a
// connection, what keeps it open and what passes inside it cannot disagree.
//
// host must be canonical (scope.CanonicalHost: lower case, punycode, no trailing dot, an address
// in its one textual form, never with a zone) and port the one the connection is made to, never
// defaulted here. A non-canonical host matches nothing it should not: at worst it is refused.
// method "" asks about a connection (whether anything to host:port may pass; the grant's scope
// says, by Tunnel, whether uninspected); a method asks about one request, whose path is in its
// wire form (see scope.CheckPath). The error is the refusal of a destination no scope covers,
// naming the task and what it asked for.
func (d *dynamic) allow(b binding.Binding, host string, port int, method, path string) (grant, error) {
	s, ok := b.Scopes.Match(scope.Request{Host: host, Port: port, Method: method, Path: path})
	if !ok {
		return grant{}, scopeMiss(b.Task, host, port, method, path)
	}
	g := grant{scope: s}
	if len(d.mirrors) == 0 {
		return g, nil // most gateways map none: the key would cost three allocations a decision
	}
	if m, ok := d.mirrors[hostPort(host, port)]; ok {
		g.mirror = &m
	}
	return g, nil
}

// hostPort is the "host:port" key of Config.Mirrors and Config.PrivateUpstreams for a canonical
// host (an IPv6 address in brackets).
func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// scopeMiss is the refusal of a destination, or of one request to it (method set), that task's
// scopes do not cover.
func scopeMiss(task, host string, port int, method, path string) *Refusal {
	dest := hostPort(host, port)
	if _, err := netip.ParseAddr(host); err == nil {
		return refuse(http.StatusForbidden, rule.ScopeMiss,
			fmt.Sprintf("task %s has no scope for the IP address %s", task, dest),
			"IP-literal destinations need a cidr scope naming a public range")
	}
	what := dest
	if method != "" {
		what = fmt.Sprintf("%s %s%s", method, dest, path)
	}
	return refuse(http.StatusForbidden, rule.ScopeMiss,
		fmt.Sprintf("task %s has no scope allowing %s", task, what),
		fmt.Sprintf("a task token with a scope such as {\"host\": %q, \"ports\": [%d]}", host, port))
}
