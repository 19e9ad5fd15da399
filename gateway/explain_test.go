package gateway

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

func TestExplain(t *testing.T) {
	h := newHarness(t)
	dev, _ := token.NewDevIssuer("dev", "aud")
	v := &token.Verifier{Audience: "aud", Issuers: map[string]token.Issuer{"dev": dev.Issuer(time.Hour)}}
	p := h.proxyHandler()
	p.cfg.Verify = v.Verify
	raw, _ := dev.Mint("task-e", "", []scope.Scope{
		{Host: "api.example.test", Methods: []string{"GET"}, Paths: []string{"/v1/*"}, Credential: "demo"},
		{Host: "evil.example.test", Credential: "demo"},
	}, time.Minute)
	tests := []struct {
		method, url, decision string
		rule                  rule.Rule
		credential            string
	}{
		{"GET", "https://api.example.test/v1/repos", "allow", rule.Scope, "demo"},
		{"POST", "https://api.example.test/v1/repos", "deny", rule.ScopeMiss, ""},
		{"GET", "https://other.example.test/", "deny", rule.ScopeMiss, ""},
		// The token names the credential for a host the catalog does not allow.
		{"GET", "https://evil.example.test/", "deny", rule.CredentialDenied, ""},
	}
	for _, tt := range tests {
		ex, err := p.Explain(raw, tt.method, tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Decision != tt.decision || ex.Rule != tt.rule || ex.Credential != tt.credential || ex.Task != "task-e" {
			t.Errorf("%s %s: %+v", tt.method, tt.url, ex)
		}
	}
	if ex, _ := p.Explain("not-a-token", "GET", "https://api.example.test/v1/x"); ex.Rule != rule.NoLease {
		t.Errorf("bad token: %+v", ex)
	}
	if _, err := p.Explain(raw, "GET", "ftp://x"); err == nil {
		t.Error("ftp URL accepted")
	}
}
