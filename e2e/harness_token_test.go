package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// This file is the test issuer: the key an agent backend's own issuer would sign task tokens with.

// issuerKey signs task tokens the way an agent backend's own issuer would.
var issuerKey = func() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}()

// mintToken signs a task token with the test issuer's key (ES256, kid k1).
func mintToken(t *testing.T, task string, scopes []map[string]any, ttl time.Duration) string {
	t.Helper()
	now := time.Now()
	claims := jwt.MapClaims{
		"iss": "e2e-issuer", "aud": "airlock-e2e", "sub": task, "jti": fmt.Sprintf("jti-%d", now.UnixNano()),
		"iat": now.Unix(), "exp": now.Add(ttl).Unix(), "scopes": scopes,
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
