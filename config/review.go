package config

import (
	"fmt"
	"strings"
	"time"
)

// Review is the review page for security teams, served on a listener of its own.
type Review struct {
	// Listen is ADDRESS:PORT; empty serves no page. Beyond loopback only with TLS. Never the
	// API's address.
	Listen string `yaml:"listen"`
	TLS    APITLS `yaml:"tls"`
	// Reviewers are the reviewer keys (read and mark only; the API does not take them). A
	// tenant's API key signs in too, and sees that tenant's leases.
	Reviewers []ReviewerKey `yaml:"reviewers"`
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration `yaml:"session_ttl"`
	// Streams bounds the live tails and exports, per identity and for the node, with a share
	// kept for reviewer keys.
	Streams Slots `yaml:"streams"`
	// Calls bounds every other page and form in progress, the same way.
	Calls Slots `yaml:"calls"`
	// Connections bounds the page's connections per address and in all, before anyone signs
	// in.
	Connections Connections `yaml:"connections"`
	// Timeouts bound how long a connection to the page goes without progress.
	Timeouts Timeouts `yaml:"timeouts"`
}

// ReviewerKey is one reviewer key, stored as the hex SHA-256 of the key.
type ReviewerKey struct {
	Name   string `yaml:"name"`
	SHA256 string `yaml:"sha256"`
	// Tenants are the tenants it reads; "*" reads every tenant.
	Tenants []string `yaml:"tenants"`
}

// validate checks the review page's own settings. That it is not on the API's address, and that
// no reviewer key is an API key, is checked across sections (Config.validateAcross).
func (r Review) validate(bad badFunc) {
	if r.Listen != "" {
		validateListen("review", r.Listen, r.TLS, "the review page", bad)
	}
	r.TLS.validate("review.tls", bad)
	if r.SessionTTL < time.Minute || r.SessionTTL > 7*24*time.Hour {
		bad("review.session_ttl", "must be between 1m and 168h")
	}
	r.Streams.validate("review.streams", true, bad)
	r.Calls.validate("review.calls", true, bad)
	r.Connections.validate("review.connections", bad)
	r.Timeouts.validate("review.timeouts", bad)
	names := map[string]bool{}
	for i, k := range r.Reviewers {
		f := fmt.Sprintf("review.reviewers[%d]", i)
		if k.Name == "" || strings.HasPrefix(k.Name, "tenant:") || names[k.Name] {
			bad(f+".name", "required, unique, and not beginning with \"tenant:\" (the name tenants' API keys sign in under)")
		}
		names[k.Name] = true
		if !isKeyHash(k.SHA256) {
			bad(f+".sha256", "must be the 64 hex digits of the key's SHA-256 (never the key itself)")
		}
		if len(k.Tenants) == 0 {
			bad(f+".tenants", "name the tenants it reads, or \"*\" for every tenant")
		}
		for _, t := range k.Tenants {
			if t == "" {
				bad(f+".tenants", "an empty tenant name")
			}
		}
	}
}
