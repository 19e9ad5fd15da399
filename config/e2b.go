package config

import (
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

// validate checks the E2B listener's own settings. That it is not on the API's or the review
// page's address is checked across sections (Config.validateAcross).
func (e E2B) validate(bad badFunc) {
	if e.Listen != "" {
		validateListen("e2b", e.Listen, e.TLS, "the E2B listener", bad)
		e.Connections.validate("e2b.connections", bad)
		e.Timeouts.validate("e2b.timeouts", bad)
	}
	e.TLS.validate("e2b.tls", bad)
	if e.Domain != "" && !dnsName.MatchString(e.Domain) {
		bad("e2b.domain", "%q is not a DNS name (no scheme, port or path)", e.Domain)
	}
}

var dnsName = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)
