package config

import (
	"fmt"
	"net/netip"
	"time"
)

// Resolver is the filtering DNS resolver.
type Resolver struct {
	Port      int      `yaml:"port"`
	Upstreams []string `yaml:"upstreams"` // empty: the host's /etc/resolv.conf nameservers
	// NXDomain answers refused names with NXDOMAIN instead of REFUSED.
	NXDomain    bool          `yaml:"nxdomain"`
	CacheMaxTTL time.Duration `yaml:"cache_max_ttl"`
	CacheNegTTL time.Duration `yaml:"cache_neg_ttl"`
	// RateQPS and RateBurst limit queries per sandbox; -1 disables.
	RateQPS   int    `yaml:"rate_qps"`
	RateBurst int    `yaml:"rate_burst"`
	Tunnel    Tunnel `yaml:"tunnel"`
}

// Tunnel holds the resolver's tunnel heuristics for names under wildcard scopes.
type Tunnel struct {
	MaxLabel    int           `yaml:"max_label"`
	MaxName     int           `yaml:"max_name"`
	EntropyBits float64       `yaml:"entropy_bits"`
	MaxDistinct int           `yaml:"max_distinct"`
	Window      time.Duration `yaml:"window"`
}

func (r Resolver) validate(bad badFunc) {
	if r.Port < 1 || r.Port > 65535 {
		bad("resolver.port", "must be 1-65535")
	}
	for i, u := range r.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			bad(fmt.Sprintf("resolver.upstreams[%d]", i), "%q is not ADDRESS:PORT", u)
		}
	}
	if r.CacheMaxTTL < 0 || r.CacheNegTTL < 0 {
		bad("resolver.cache_max_ttl", "must be >= 0")
	}
	r.Tunnel.validate(bad)
}

func (t Tunnel) validate(bad badFunc) {
	if t.MaxLabel < 0 || t.MaxName < 0 || t.EntropyBits < 0 || t.MaxDistinct < 0 || t.Window < 0 {
		bad("resolver.tunnel", "limits must be >= 0 (0 takes the default)")
	}
}
