package token

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/scope"
)

// FuzzVerify checks that no input makes Verify panic or accept a token it did not issue.
func FuzzVerify(f *testing.F) {
	dev, _ := NewDevIssuer("dev", "aud")
	good, _ := dev.Mint("t", "", []scope.Scope{{Host: "a.example"}}, time.Minute)
	f.Add(good)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ0In0.")
	f.Add("a.b.c")
	other, _ := NewDevIssuer("dev", "aud")
	v := &Verifier{Audience: "aud", Issuers: map[string]Issuer{"dev": other.Issuer(time.Hour)}}
	f.Fuzz(func(t *testing.T, raw string) {
		if _, err := v.Verify(raw); err == nil {
			t.Fatalf("accepted a token signed by no trusted key: %q", raw)
		}
	})
}
