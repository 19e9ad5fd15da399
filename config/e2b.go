package config

import (
	"net/netip"
	"regexp"
)

// E2B serves E2B's control plane and sandbox API (package e2b) on a listener of its own, so the
// unchanged E2B SDKs drive this node's sandboxes.
type E2B struct {
	// Listen is ADDRESS:PORT; empty serves none. Beyond loopback only with TLS. Never the API's
	// or the review page's address.
	Listen string `yaml:"listen"`
	TLS    APITLS `yaml:"tls"`
	// Domain is the sandbox domain the SDK is told (getHost(port) answers PORT-ID.DOMAIN); a
	// DNS name, empty for none.
	Domain string `yaml:"domain"`
	// Connections bounds the listener's connections per address and in all, before any key is
	// known. (A call's API work takes the tenant's api.calls and api.streams slots.)
	Connections Connections `yaml:"connections"`
	// Timeouts bound how long a connection to the listener goes without progress.
	Timeouts Timeouts `yaml:"timeouts"`
}

// validateE2B checks the E2B listener's settings.
func (c *Config) validateE2B(bad func(field, format string, args ...any)) {
	e := c.E2B
	if e.Listen != "" {
		if ap, err := netip.ParseAddrPort(e.Listen); err != nil {
			bad("e2b.listen", "%q is not ADDRESS:PORT", e.Listen)
		} else if !ap.Addr().IsLoopback() && !e.TLS.Enabled() {
			bad("e2b.listen", "%s is not a loopback address; the E2B listener may listen beyond loopback only with TLS (e2b.tls.cert_file and key_file)", ap.Addr())
		}
		if e.Listen == c.API.Listen || e.Listen == c.Review.Listen {
			bad("e2b.listen", "is the API's or the review page's address; the E2B listener has one of its own")
		}
	}
	if (e.TLS.CertFile == "") != (e.TLS.KeyFile == "") {
		bad("e2b.tls", "cert_file and key_file go together")
	}
	if e.Listen != "" {
		e.Connections.validate("e2b.connections", bad)
		e.Timeouts.validate("e2b.timeouts", bad)
	}
	if e.Domain != "" && !dnsName.MatchString(e.Domain) {
		bad("e2b.domain", "%q is not a DNS name (no scheme, port or path)", e.Domain)
	}
}

var dnsName = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)
