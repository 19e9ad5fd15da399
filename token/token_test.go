package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlock-dev/airlock/scope"
)

func TestVerify(t *testing.T) {
	dev, err := NewDevIssuer("dev", "airlock-test")
	if err != nil {
		t.Fatal(err)
	}
	v := &Verifier{Audience: "airlock-test", Issuers: map[string]Issuer{"dev": dev.Issuer(time.Hour)}}
	good, err := dev.Mint("task-1", "acme", []scope.Scope{{Host: "API.Example.test"}}, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	task, err := v.Verify(good)
	if err != nil {
		t.Fatalf("Verify(good): %v", err)
	}
	if task.ID != "task-1" || task.Tenant != "acme" || task.Scopes[0].Host != "api.example.test" || task.JTI == "" {
		t.Fatalf("task = %+v", task)
	}

	other, _ := NewDevIssuer("dev", "airlock-test")
	forged, _ := other.Mint("task-1", "acme", nil, time.Minute)
	wrongAud, _ := (&DevIssuer{Name: "dev", Audience: "elsewhere", Key: dev.Key}).Mint("t", "", nil, time.Minute)
	tooLong, _ := dev.Mint("t", "", nil, 2*time.Hour)
	expired, _ := dev.Mint("t", "", nil, -time.Minute)
	badScope, _ := dev.Mint("t", "", []scope.Scope{{CIDR: "10.0.0.0/8"}}, time.Minute)
	none := jwt.NewWithClaims(jwt.SigningMethodNone, Claims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "dev", Subject: "t", Audience: jwt.ClaimStrings{"airlock-test"}, ID: "x",
		IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Minute)),
	}})
	noneRaw, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)

	// An HMAC token keyed with the issuer's public key bytes: the classic key-confusion attack.
	pubDER, _ := x509.MarshalPKIXPublicKey(dev.Key.Public())
	hmacTok := jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "dev", Subject: "t", Audience: jwt.ClaimStrings{"airlock-test"}, ID: "x",
		IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Minute)),
	}})
	hmacRaw, _ := hmacTok.SignedString(pubDER)

	// A key of the wrong type under the right kid.
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	v2 := &Verifier{Audience: "airlock-test", Issuers: map[string]Issuer{"dev": {Name: "dev", Keys: map[string]crypto.PublicKey{"dev": &ec.PublicKey}}}}

	tests := []struct {
		name, raw, want string
		v               *Verifier
	}{
		{"malformed", "not.a.jwt", "malformed", v},
		{"forged signature", forged, "signature", v},
		{"wrong audience", wrongAud, "aud", v},
		{"lifetime over issuer max", tooLong, "maximum", v},
		{"expired", expired, "expired", v},
		{"private cidr scope", badScope, "non-public", v},
		{"alg none", noneRaw, "signing method none", v},
		{"hmac with public key", hmacRaw, "signing method HS256", v},
		{"key type mismatch", good, "does not fit", v2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.v.Verify(tt.raw)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify = %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
}

func TestVerifyForTenants(t *testing.T) {
	dev, _ := NewDevIssuer("dev", "aud")
	iss := dev.Issuer(time.Hour)
	v := &Verifier{Audience: "aud", Issuers: map[string]Issuer{"dev": iss}}
	mint := func(tenant string) string { s, _ := dev.Mint("t", tenant, nil, time.Minute); return s }
	// Unrestricted (the dev issuer): the API key's tenant, or the token's own.
	if task, err := v.VerifyFor(mint(""), "acme"); err != nil || task.Tenant != "acme" {
		t.Fatalf("claimless token for acme: %+v %v", task, err)
	}
	if _, err := v.VerifyFor(mint("globex"), "acme"); err == nil {
		t.Fatal("a globex token was accepted through acme's key")
	}
	iss.Tenants = []string{"acme"}
	v.Issuers["dev"] = iss
	if _, err := v.VerifyFor(mint("globex"), ""); err == nil || !strings.Contains(err.Error(), "may not speak for") {
		t.Fatalf("restricted issuer, other tenant: %v", err)
	}
	if task, err := v.VerifyFor(mint("acme"), ""); err != nil || task.Tenant != "acme" {
		t.Fatalf("restricted issuer, its tenant: %+v %v", task, err)
	}
	iss.Tenants = []string{"*"}
	v.Issuers["dev"] = iss
	if _, err := v.VerifyFor(mint("globex"), ""); err != nil {
		t.Fatalf("issuer for every tenant: %v", err)
	}
}

// A token's profiles become the deployment's scopes for them, each tagged; a profile the
// deployment does not define refuses the token; a token cannot tag its own scopes.
func TestProfilesExpanded(t *testing.T) {
	dev, _ := NewDevIssuer("dev", "aud")
	v := &Verifier{Audience: "aud", Issuers: map[string]Issuer{"dev": dev.Issuer(time.Hour)}, Profiles: scope.Builtin()}
	raw, err := dev.MintWith("t", "acme", []scope.Scope{{Host: "own.example.test", Profile: "pypi"}}, []string{"pypi"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	task, err := v.Verify(raw)
	if err != nil {
		t.Fatal(err)
	}
	if task.Scopes[0].Host != "own.example.test" || task.Scopes[0].Profile != "" {
		t.Fatalf("the token's own scope is %+v, want it untagged", task.Scopes[0])
	}
	if s, ok := task.Scopes.Match(scope.Request{Host: "files.pythonhosted.org", Port: 443, Method: "GET", Path: "/packages/x.whl"}); !ok || s.Profile != "pypi" {
		t.Fatalf("the pypi profile's file host: %v %v", s, ok)
	}
	bad, _ := dev.MintWith("t", "acme", nil, []string{"pypi", "everything"}, time.Minute)
	if _, err := v.Verify(bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `profile "everything" is not defined`) {
		t.Fatalf("unknown profile: %v", err)
	}
}
