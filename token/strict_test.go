package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// signRaw signs header and claims, given as raw JSON, with the issuer's real key: what an
// attacker who can get an issuer to sign odd JSON, or a sloppy issuer, produces.
func signRaw(t *testing.T, key *ecdsa.PrivateKey, header, claims string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	sig, err := jwt.SigningMethodES256.Sign(signing, key)
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

// Task tokens are parsed strictly: signed with the issuer's real key, these are still refused.
func TestStrictParsing(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	v := &Verifier{Audience: "airlock-test", Issuers: map[string]Issuer{"iss": {Name: "iss", Keys: map[string]crypto.PublicKey{"k1": &key.PublicKey}}}}
	now := time.Now().Unix()
	claims := func(extra string) string {
		return fmt.Sprintf(`{"iss":"iss","aud":"airlock-test","sub":"task-1","jti":"j1","iat":%d,"exp":%d,"scopes":[{"host":"a.example"}]%s}`, now, now+300, extra)
	}
	const hdr = `{"alg":"ES256","kid":"k1","typ":"JWT"}`
	good := signRaw(t, key, hdr, claims(""))
	if _, err := v.Verify(good); err != nil {
		t.Fatalf("the well-formed token was refused: %v", err)
	}
	cases := []struct{ name, header, claims, want string }{
		{"crit naming an unknown extension", `{"alg":"ES256","kid":"k1","crit":["exp-ext"],"exp-ext":1}`, claims(""), "does not understand"},
		{"empty crit", `{"alg":"ES256","kid":"k1","crit":[]}`, claims(""), "non-empty"},
		{"duplicate alg in the header", `{"alg":"none","alg":"ES256","kid":"k1"}`, claims(""), "more than once"},
		{"duplicate aud", hdr, claims(`,"aud":"elsewhere"`), "more than once"},
		{"duplicate sub", hdr, claims(`,"sub":"task-2"`), "more than once"},
		{"duplicate exp", hdr, claims(fmt.Sprintf(`,"exp":%d`, now+86400*365)), "more than once"},
		{"duplicate that differs in case", hdr, claims(`,"SUB":"task-2"`), "more than once"},
		{"duplicate by Unicode folding", hdr, claims(`,"ſcopes":[{"host":"evil.example"}]`), "more than once"},
		{"duplicate inside a scope", hdr, strings.Replace(claims(""), `{"host":"a.example"}`, `{"host":"a.example","host":"evil.example"}`, 1), "more than once"},
		{"exp as a string", hdr, strings.Replace(claims(""), fmt.Sprintf(`"exp":%d`, now+300), fmt.Sprintf(`"exp":"%d"`, now+300), 1), "must be a number"},
		{"iat as a string", hdr, strings.Replace(claims(""), fmt.Sprintf(`"iat":%d`, now), fmt.Sprintf(`"iat":"%d"`, now), 1), "must be a number"},
		{"nbf as a string", hdr, claims(fmt.Sprintf(`,"nbf":"%d"`, now)), "must be a number"},
		{"another typ", `{"alg":"ES256","kid":"k1","typ":"at+jwt"}`, claims(""), "typ"},
		{"trailing data", hdr, claims("") + `{}`, "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := v.Verify(signRaw(t, key, c.header, c.claims))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Verify = %v, want ErrInvalid mentioning %q", err, c.want)
			}
		})
	}
	// Padded base64 segments are not the compact form.
	parts := strings.Split(good, ".")
	padded := parts[0] + strings.Repeat("=", (4-len(parts[0])%4)%4) + "." + parts[1] + "." + parts[2]
	if padded != good {
		if _, err := v.Verify(padded); err == nil {
			t.Fatal("a padded header was accepted")
		}
	}
}
