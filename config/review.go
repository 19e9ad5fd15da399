package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
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

// validateReview checks the review page's settings.
func (c *Config) validateReview(bad func(field, format string, args ...any)) {
	r := c.Review
	if r.Listen != "" {
		if ap, err := netip.ParseAddrPort(r.Listen); err != nil {
			bad("review.listen", "%q is not ADDRESS:PORT", r.Listen)
		} else if !ap.Addr().IsLoopback() && !r.TLS.Enabled() {
			bad("review.listen", "%s is not a loopback address; the review page may listen beyond loopback only with TLS (review.tls.cert_file and key_file)", ap.Addr())
		}
		if r.Listen == c.API.Listen {
			bad("review.listen", "is the API's address; the review page is served on an origin of its own")
		}
	}
	if (r.TLS.CertFile == "") != (r.TLS.KeyFile == "") {
		bad("review.tls", "cert_file and key_file go together")
	}
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
		if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
			bad(f+".sha256", "must be the 64 hex digits of the key's SHA-256 (never the key itself)")
		}
		for _, a := range c.API.Keys {
			if strings.EqualFold(a.SHA256, k.SHA256) {
				bad(f+".sha256", "is also an API key (of tenant %s); a reviewer key must not be able to lease or run anything", a.Tenant)
			}
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
