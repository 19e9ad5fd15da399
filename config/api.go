package config

import (
	"encoding/hex"
	"fmt"
	"net/url"
)

// API is the pool API listener.
type API struct {
	// Listen is ADDRESS:PORT; beyond loopback only with TLS.
	Listen string `yaml:"listen"`
	// TLS serves the API over TLS with this certificate and key (PEM files).
	TLS APITLS `yaml:"tls"`
	// Advertise is the URL other nodes reach this API at (for example
	// https://node-2.internal:7070); empty derives it from listen.
	Advertise string `yaml:"advertise"`
	// NodeSecretFile holds the deployment's node secret, which signs the calls nodes forward
	// to each other; every node must have the same one. Empty: the nodes share one through
	// Redis (made by the first node to start).
	NodeSecretFile string `yaml:"node_secret_file"`
	// PeerCAFile holds extra roots (PEM) for verifying other nodes' API certificates.
	PeerCAFile string `yaml:"peer_ca_file"`
	// Keys are the API keys, stored as the hex SHA-256 of the key, each belonging to a tenant.
	Keys []APIKey `yaml:"keys"`
	// RatePerKey and BurstPerKey limit requests per API key (429 past them); 0 disables.
	RatePerKey  int `yaml:"rate_per_key"`
	BurstPerKey int `yaml:"burst_per_key"`
	// MaxPortsPerLease bounds the ports one lease may expose with `airlock port` at once; each
	// is a listener on the node. 0 means 8.
	MaxPortsPerLease int `yaml:"max_ports_per_lease"`
	// Streams bounds the calls held open (commands, process output and waits, file transfers,
	// audit pages), per tenant and for the node.
	Streams Slots `yaml:"streams"`
	// Calls bounds every other call in progress, per tenant (or reviewer key, on the approval
	// endpoints) and for the node, with a share kept for reviewer keys.
	Calls Slots `yaml:"calls"`
	// Connections bounds the API's connections per address and in all, before any key is
	// known.
	Connections Connections `yaml:"connections"`
	// Timeouts bound how long an API connection goes without progress.
	Timeouts Timeouts `yaml:"timeouts"`
}

// APIKey is one API key, by its hash.
type APIKey struct {
	Tenant string `yaml:"tenant"`
	SHA256 string `yaml:"sha256"`
}

// validate checks the API's own settings. That the review page and the E2B listener are not on
// its address, and that no reviewer key is one of its keys, is checked across sections
// (Config.validateAcross).
func (a API) validate(bad badFunc) {
	validateListen("api", a.Listen, a.TLS, "the API", bad)
	a.TLS.validate("api.tls", bad)
	if a.Advertise != "" {
		if u, err := url.Parse(a.Advertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
			bad("api.advertise", "%q is not a URL such as https://node-2.internal:7070", a.Advertise)
		} else if (u.Scheme == "https") != a.TLS.Enabled() {
			bad("api.advertise", "its scheme must be https exactly when api.tls is set")
		}
	}
	for i, k := range a.Keys {
		if k.Tenant == "" {
			bad(fmt.Sprintf("api.keys[%d].tenant", i), "required")
		}
		if !isKeyHash(k.SHA256) {
			bad(fmt.Sprintf("api.keys[%d].sha256", i), "must be the 64 hex digits of the key's SHA-256 (never the key itself)")
		}
	}
	if a.RatePerKey < 0 || a.BurstPerKey < 0 {
		bad("api.rate_per_key", "must be >= 0")
	}
	if a.MaxPortsPerLease < 0 || a.MaxPortsPerLease > 1000 {
		bad("api.max_ports_per_lease", "must be between 0 (the default, 8) and 1000")
	}
	a.Streams.validate("api.streams", false, bad)
	a.Calls.validate("api.calls", true, bad)
	a.Connections.validate("api.connections", bad)
	a.Timeouts.validate("api.timeouts", bad)
}

// isKeyHash reports whether s is a key as API and reviewer keys are stored: the 64 hex digits
// of its SHA-256.
func isKeyHash(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32
}
