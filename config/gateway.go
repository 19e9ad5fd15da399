package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/scope"
)

// Gateway is the egress proxy.
type Gateway struct {
	Port int `yaml:"port"`
	// TransparentPort takes the connections sandboxes make to ports 80 and 443 without the
	// proxy (the sandbox network redirects them there), under the same rules; -1 turns the
	// redirect off, and such clients simply fail to connect.
	TransparentPort int `yaml:"transparent_port"`
	// PrivateUpstreams pins names to private addresses, one name and port at a time.
	PrivateUpstreams []PrivateUpstream `yaml:"private_upstreams"`
	// UpstreamCAFiles are extra roots for verifying upstream TLS (besides the system's).
	UpstreamCAFiles []string `yaml:"upstream_ca_files"`
	// Budget bounds each lease's requests and bytes sent upstream; a token may narrow it.
	Budget budget.Budget `yaml:"budget"`
	// Approvals are the settings of scopes that hold requests for a reviewer.
	Approvals Approvals `yaml:"approvals"`
	// Mirrors send requests for a public name to an operator's server instead.
	Mirrors []Mirror `yaml:"mirrors"`
}

// Approvals are how requests a scope asks approval for are held.
type Approvals struct {
	// Hold is how long a request waits before the sandbox is told it is pending; TTL how long
	// an unanswered approval lasts.
	Hold time.Duration `yaml:"hold"`
	TTL  time.Duration `yaml:"ttl"`
	// Webhook, when set, receives each new approval as JSON (POST), for reviewers to be told.
	Webhook string `yaml:"webhook"`
	// AllowSelf lets the API key that leased approve its own lease's requests.
	AllowSelf bool `yaml:"allow_self"`
}

// Mirror sends what is asked of Host:Port to To, a server of the operator's such as an internal
// mirror of a public registry. Scopes are still decided on Host; the credential catalog, TLS and
// the dial are To's.
type Mirror struct {
	Host string `yaml:"host"`
	Port int    `yaml:"port"` // 0 means 443
	// To is the mirror's URL: https://HOST[:PORT] (or http://, with no credential sent).
	To string `yaml:"to"`
}

// MirrorTarget is where a Mirror sends requests.
type MirrorTarget struct {
	Host   string // canonical
	Port   int
	Scheme string
	To     string // host:port
	Key    string // the "host:port" asked
}

// Target checks m and says where it sends requests.
func (m Mirror) Target() (MirrorTarget, error) {
	host, err := scope.CanonicalHost(m.Host)
	if err != nil || m.Host == "" {
		return MirrorTarget{}, fmt.Errorf("host %q: not a host name", m.Host)
	}
	port := m.Port
	if port == 0 {
		port = 443
	}
	if port < 1 || port > 65535 {
		return MirrorTarget{}, fmt.Errorf("port %d: must be 1-65535", m.Port)
	}
	u, err := url.Parse(m.To)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return MirrorTarget{}, fmt.Errorf("to %q: want https://HOST[:PORT] or http://HOST[:PORT], nothing after it", m.To)
	}
	toHost, err := scope.CanonicalHost(u.Hostname())
	if err != nil {
		return MirrorTarget{}, fmt.Errorf("to %q: %v", m.To, err)
	}
	toPort := 443
	if u.Scheme == "http" {
		toPort = 80
	}
	if p := u.Port(); p != "" {
		if toPort, err = strconv.Atoi(p); err != nil || toPort < 1 || toPort > 65535 {
			return MirrorTarget{}, fmt.Errorf("to %q: bad port", m.To)
		}
	}
	return MirrorTarget{Host: toHost, Port: toPort, Scheme: u.Scheme, To: net.JoinHostPort(toHost, strconv.Itoa(toPort)),
		Key: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

// PrivateUpstream pins Host:Port to Address.
type PrivateUpstream struct {
	Host    string `yaml:"host"`
	Port    int    `yaml:"port"`
	Address string `yaml:"address"`
}

// validate checks the gateway's own settings. The transparent port, whose rule names the
// resolver's port, is checked across sections (Config.validateAcross).
func (g Gateway) validate(bad badFunc) {
	g.Approvals.validate(bad)
	if g.Port < 1 || g.Port > 65535 {
		bad("gateway.port", "must be 1-65535")
	}
	for i, m := range g.Mirrors {
		if _, err := m.Target(); err != nil {
			bad(fmt.Sprintf("gateway.mirrors[%d]", i), "%v", err)
		}
	}
	for i, u := range g.PrivateUpstreams {
		u.validate(fmt.Sprintf("gateway.private_upstreams[%d]", i), bad)
	}
	if g.Budget.Requests < 0 || g.Budget.BytesUp < 0 {
		bad("gateway.budget", "limits must be >= 0 (0 means no limit)")
	}
}

func (a Approvals) validate(bad badFunc) {
	if a.Hold < time.Second || a.Hold > 10*time.Minute || a.TTL < a.Hold || a.TTL > 24*time.Hour {
		bad("gateway.approvals", "hold must be 1s to 10m and ttl from hold to 24h (hold %s, ttl %s)", a.Hold, a.TTL)
	}
	if a.Webhook != "" {
		if pu, err := url.Parse(a.Webhook); err != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" {
			bad("gateway.approvals.webhook", "%q is not an http(s) URL", a.Webhook)
		}
	}
}

// validate checks the pin at field: one exact name, a port, and an ADDRESS:PORT to dial.
func (u PrivateUpstream) validate(field string, bad badFunc) {
	if _, err := scope.CanonicalHost(u.Host); err != nil || u.Host == "" || strings.HasPrefix(u.Host, "*") {
		bad(field+".host", "must be one exact name")
	}
	if u.Port < 1 || u.Port > 65535 {
		bad(field+".port", "must be 1-65535")
	}
	if _, err := netip.ParseAddrPort(u.Address); err != nil {
		bad(field+".address", "%q is not ADDRESS:PORT", u.Address)
	}
}
