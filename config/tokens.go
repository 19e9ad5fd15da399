package config

import (
	"fmt"
	"slices"
	"time"
)

// Tokens are the task token issuers this node trusts.
type Tokens struct {
	Issuers []Issuer `yaml:"issuers"`
}

// Issuer is one trusted issuer.
type Issuer struct {
	Name   string            `yaml:"name"`
	Keys   map[string]string `yaml:"keys"` // kid -> PEM public key file
	MaxTTL time.Duration     `yaml:"max_ttl"`
	// Tenants the issuer may speak for: a lease's API key, or a token presented to the
	// gateway by a client outside the pool, for any other tenant is refused. Required; "*"
	// allows every tenant, for an issuer that serves them all.
	Tenants []string `yaml:"tenants"`
}

func (t Tokens) validate(bad badFunc) {
	for i, iss := range t.Issuers {
		iss.validate(fmt.Sprintf("tokens.issuers[%d]", i), bad)
	}
}

func (iss Issuer) validate(field string, bad badFunc) {
	if iss.Name == "" {
		bad(field+".name", "required")
	}
	if len(iss.Keys) == 0 {
		bad(field+".keys", "at least one key file is required")
	}
	if len(iss.Tenants) == 0 || slices.Contains(iss.Tenants, "") {
		bad(field+".tenants", "list the tenants this issuer may speak for (\"*\" for every tenant)")
	}
}
