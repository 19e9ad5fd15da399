package config

import "net/netip"

// Dev holds what only the all-in-one dev node does.
type Dev struct {
	// Issuer mints task tokens from --allow lists, with any scope, for any API key: off by
	// default, on only in the embedded defaults of `airlock up` without --config (and refused
	// with an API beyond loopback). Never on a production node.
	Issuer bool `yaml:"issuer"`
	// DemoUpstream, when set, runs a tiny HTTPS server there that checks the demo credential,
	// pinned as api.example.test:443.
	DemoUpstream string `yaml:"demo_upstream"`
}

// DemoHost is the name the demo upstream answers to.
const DemoHost = "api.example.test"

// validate checks the dev node's own settings. That the dev issuer is on only while the API
// listens on loopback is checked across sections (Config.validateAcross).
func (d Dev) validate(bad badFunc) {
	if d.DemoUpstream != "" {
		if _, err := netip.ParseAddrPort(d.DemoUpstream); err != nil {
			bad("dev.demo_upstream", "%q is not ADDRESS:PORT", d.DemoUpstream)
		}
	}
}
