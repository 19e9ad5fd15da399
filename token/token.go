package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/scope"
)

// ErrInvalid is wrapped by every verification failure; the wrapped text says what was wrong
// and never repeats the token.
var ErrInvalid = errors.New("invalid task token")

// Claims are the task token's claims.
type Claims struct {
	jwt.RegisteredClaims
	Tenant string        `json:"tenant,omitempty"`
	Scopes []scope.Scope `json:"scopes"`
	// Profiles names bundles of scopes the deployment defines (see scope.Profiles); they are
	// added after the token's own scopes.
	Profiles []string `json:"profiles,omitempty"`
	// Budget narrows the deployment's per-lease budget.
	Budget budget.Budget `json:"budget,omitzero"`
}

// Task is a verified token: who the task is, what it may reach, and until when.
type Task struct {
	ID      string // sub
	JTI     string
	Issuer  string
	Tenant  string
	Expires time.Time
	Scopes  scope.Set
	Budget  budget.Budget
}

// Issuer is a token issuer the operator trusts.
type Issuer struct {
	Name string // matched against iss
	// Keys by kid. A token without kid is accepted only when there is exactly one key.
	Keys map[string]crypto.PublicKey
	// MaxTTL caps exp-iat; zero means one day.
	MaxTTL time.Duration
	// Tenants are the tenants this issuer may speak for: a token for any other is refused
	// (see VerifyFor). Empty means any, which only the dev issuer uses (it mints for the
	// caller's own tenant); config.Validate makes operators list them, "*" for any.
	Tenants []string
}

// Verifier checks task tokens against trusted issuers. Safe for concurrent use once built.
type Verifier struct {
	Audience string
	Issuers  map[string]Issuer
	// Profiles are the scope bundles a token may name; a name not here refuses the token.
	Profiles scope.Profiles
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Verify parses and checks raw, returning the task it describes.
func (v *Verifier) Verify(raw string) (Task, error) {
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if err := checkStrict(raw); err != nil {
		return Task{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var claims Claims
	var iss Issuer
	parser := jwt.NewParser(
		jwt.WithStrictDecoding(),
		jwt.WithValidMethods([]string{"ES256", "EdDSA", "RS256"}),
		jwt.WithAudience(v.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(now),
		jwt.WithLeeway(5*time.Second),
	)
	_, err := parser.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) {
		name, _ := t.Claims.GetIssuer()
		var ok bool
		if iss, ok = v.Issuers[name]; !ok {
			return nil, fmt.Errorf("issuer %q is not trusted", name)
		}
		kid, _ := t.Header["kid"].(string)
		if kid == "" && len(iss.Keys) == 1 {
			for _, k := range iss.Keys {
				return checkAlg(t.Method, k)
			}
		}
		k, ok := iss.Keys[kid]
		if !ok {
			return nil, fmt.Errorf("issuer %q has no key %q", name, kid)
		}
		return checkAlg(t.Method, k)
	})
	if err != nil {
		return Task{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch {
	case claims.Subject == "":
		return Task{}, fmt.Errorf("%w: sub (task id) is required", ErrInvalid)
	case claims.ID == "":
		return Task{}, fmt.Errorf("%w: jti is required", ErrInvalid)
	case claims.IssuedAt == nil:
		return Task{}, fmt.Errorf("%w: iat is required", ErrInvalid)
	}
	maxTTL := iss.MaxTTL
	if maxTTL == 0 {
		maxTTL = 24 * time.Hour
	}
	if claims.ExpiresAt.Sub(claims.IssuedAt.Time) > maxTTL {
		return Task{}, fmt.Errorf("%w: lifetime exceeds issuer %q's maximum of %s", ErrInvalid, iss.Name, maxTTL)
	}
	for i := range claims.Scopes {
		claims.Scopes[i].Profile = "" // only the deployment says a scope came from a profile
	}
	scopes, err := scope.Parse(claims.Scopes)
	if err != nil {
		return Task{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(claims.Profiles) > 0 {
		more, err := v.Profiles.Expand(claims.Profiles)
		if err != nil {
			return Task{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		scopes = append(scopes, more...)
	}
	return Task{
		ID: claims.Subject, JTI: claims.ID, Issuer: iss.Name, Tenant: claims.Tenant,
		Expires: claims.ExpiresAt.Time, Scopes: scopes, Budget: claims.Budget,
	}, nil
}

// VerifyFor verifies raw as a token used on behalf of tenant: a lease's API key's tenant, or
// "" for a client outside the pool, whose token must then name its own. A token that names
// another tenant than the API key's is refused, and so is a tenant its issuer may not speak for
// (Issuer.Tenants). The task returned carries the tenant it acts for.
func (v *Verifier) VerifyFor(raw, tenant string) (Task, error) {
	task, err := v.Verify(raw)
	if err != nil {
		return Task{}, err
	}
	switch {
	case tenant != "" && task.Tenant != "" && task.Tenant != tenant:
		return Task{}, fmt.Errorf("%w: token is for tenant %q, the API key for %q", ErrInvalid, task.Tenant, tenant)
	case tenant != "":
		task.Tenant = tenant
	}
	iss := v.Issuers[task.Issuer]
	if len(iss.Tenants) > 0 && !slices.Contains(iss.Tenants, "*") && !slices.Contains(iss.Tenants, task.Tenant) {
		if task.Tenant == "" {
			return Task{}, fmt.Errorf("%w: issuer %q speaks only for tenants %v, and the token names none", ErrInvalid, task.Issuer, iss.Tenants)
		}
		return Task{}, fmt.Errorf("%w: issuer %q may not speak for tenant %q", ErrInvalid, task.Issuer, task.Tenant)
	}
	return task, nil
}

// checkAlg refuses a key whose type does not fit the token's algorithm, so an RSA public key can
// never be used as an HMAC secret or the like.
func checkAlg(m jwt.SigningMethod, k crypto.PublicKey) (any, error) {
	ok := false
	switch m.Alg() {
	case "ES256":
		_, ok = k.(*ecdsa.PublicKey)
	case "EdDSA":
		_, ok = k.(ed25519.PublicKey)
	case "RS256":
		_, ok = k.(*rsa.PublicKey)
	}
	if !ok {
		return nil, fmt.Errorf("key type %T does not fit algorithm %s", k, m.Alg())
	}
	return k, nil
}

// ParsePublicKeyPEM reads a PKIX public key (ECDSA P-256, Ed25519 or RSA) from PEM.
func ParsePublicKeyPEM(b []byte) (crypto.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParsePKIXPublicKey(blk.Bytes)
}

// DevIssuer mints tokens for the all-in-one dev node. It must never be wired into a production
// node: whoever can call Mint can grant any scope.
type DevIssuer struct {
	Name     string
	Audience string
	Key      ed25519.PrivateKey
}

// NewDevIssuer returns an issuer with a fresh key.
func NewDevIssuer(name, audience string) (*DevIssuer, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return &DevIssuer{Name: name, Audience: audience, Key: k}, nil
}

// Issuer returns the verifier-side description of d.
func (d *DevIssuer) Issuer(maxTTL time.Duration) Issuer {
	return Issuer{Name: d.Name, Keys: map[string]crypto.PublicKey{"dev": d.Key.Public()}, MaxTTL: maxTTL}
}

// Mint signs a token for task with scopes, valid for ttl.
func (d *DevIssuer) Mint(task, tenant string, scopes []scope.Scope, ttl time.Duration) (string, error) {
	return d.MintWith(task, tenant, scopes, nil, ttl)
}

// MintWith is Mint for a token that also names profiles.
func (d *DevIssuer) MintWith(task, tenant string, scopes []scope.Scope, profiles []string, ttl time.Duration) (string, error) {
	now := time.Now()
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", err
	}
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: d.Name, Subject: task, Audience: jwt.ClaimStrings{d.Audience},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID: hex.EncodeToString(id[:]),
		},
		Tenant:   tenant,
		Scopes:   scopes,
		Profiles: profiles,
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	t.Header["kid"] = "dev"
	return t.SignedString(d.Key)
}
