package config

import (
	"strings"
	"testing"
)

// The rules that compare one section with another (Config.validateAcross) each report once,
// under the field they concern, whichever section's own check runs first.
func TestValidateAcrossSections(t *testing.T) {
	key := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"review on the API's address", func(c *Config) { c.Review.Listen = c.API.Listen },
			"review.listen: is the API's address; the review page is served on an origin of its own"},
		{"e2b on the review page's address", func(c *Config) { c.Review.Listen, c.E2B.Listen = "127.0.0.1:7071", "127.0.0.1:7071" },
			"e2b.listen: is the API's or the review page's address; the E2B listener has one of its own"},
		{"e2b on the API's address", func(c *Config) { c.E2B.Listen = c.API.Listen },
			"e2b.listen: is the API's or the review page's address; the E2B listener has one of its own"},
		{"reviewer key that is an API key", func(c *Config) {
			c.API.Keys = []APIKey{{Tenant: "acme", SHA256: key}}
			c.Review.Reviewers = []ReviewerKey{{Name: "s", SHA256: strings.ToUpper(key), Tenants: []string{"*"}}}
		}, "review.reviewers[0].sha256: is also an API key (of tenant acme); a reviewer key must not be able to lease or run anything"},
		{"transparent port on the resolver's", func(c *Config) { c.Gateway.TransparentPort = c.Resolver.Port },
			"gateway.transparent_port: must be 1-65535, not the gateway's or the resolver's port, or -1 for no redirect"},
		{"transparent port out of range and on a bad resolver port", func(c *Config) { c.Gateway.TransparentPort, c.Resolver.Port = 0, 0 },
			"gateway.transparent_port: must be 1-65535, not the gateway's or the resolver's port, or -1 for no redirect"},
		{"dev issuer with the API beyond loopback", func(c *Config) {
			c.Dev.Issuer = true
			c.API.Listen, c.API.TLS = "0.0.0.0:7070", APITLS{CertFile: "/c", KeyFile: "/k"}
		}, "dev.issuer: the dev issuer mints tokens with any scope for whoever holds an API key; it may be on only while the API listens on loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate accepted it; want %q", tt.want)
			}
			if n := strings.Count(err.Error()+"\n", tt.want+"\n"); n != 1 {
				t.Fatalf("Validate = %v\nwant %q once, got it %d times", err, tt.want, n)
			}
		})
	}
}
