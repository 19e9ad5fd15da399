package config

import (
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
