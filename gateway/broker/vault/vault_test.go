package vault

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/internal/wait"
)

// startVault runs a real Vault dev server from bin/vault (built by `make vault`).
func startVault(t testing.TB) *devstack.Vault {
	t.Helper()
	bin, _ := filepath.Abs("../../../bin/vault")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run the tests with `make test`, which builds a real Vault", bin)
	}
	ctx, cancel := context.WithCancel(context.Background())
	v, err := devstack.StartVault(ctx, bin, t.TempDir())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); v.Stop() })
	return v
}

func TestKVReadCacheAndOutage(t *testing.T) {
	v := startVault(t)
	ctx := context.Background()
	if err := v.SeedKV(ctx, "airlock/gh", map[string]any{"token": "first-value-123"}); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Address: v.Addr, Token: v.Token})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	b.now = func() time.Time { return now }
	cat, err := broker.NewCatalog([]broker.Entry{{
		Name: "gh", Source: broker.Source{Kind: broker.SourceKV, Path: "airlock/gh", TTL: time.Minute},
		Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "token {{.token}}"},
		Hosts:  []string{"api.github.com"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := cat["gh"]
	s, err := b.Get(ctx, broker.Lease{ID: "l-1"}, e)
	if err != nil || s["token"] != "first-value-123" {
		t.Fatalf("Get = %v, %v", s, err)
	}
	// A changed value is picked up only after the TTL.
	v.SeedKV(ctx, "airlock/gh", map[string]any{"token": "second-value-456"})
	if s, _ := b.Get(ctx, broker.Lease{ID: "l-1"}, e); s["token"] != "first-value-123" {
		t.Fatalf("cached value not served: %v", s)
	}
	now = now.Add(2 * time.Minute)
	if s, _ := b.Get(ctx, broker.Lease{ID: "l-1"}, e); s["token"] != "second-value-456" {
		t.Fatalf("value not refreshed after TTL: %v", s)
	}
	// Vault gone: the cached value serves until its TTL, never longer.
	v.Stop()
	if s, err := b.Get(ctx, broker.Lease{ID: "l-1"}, e); err != nil || s["token"] != "second-value-456" {
		t.Fatalf("within TTL with Vault down: %v, %v", s, err)
	}
	now = now.Add(2 * time.Minute)
	_, err = b.Get(ctx, broker.Lease{ID: "l-1"}, e)
	if !errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), `"gh"`) || strings.Contains(err.Error(), "second-value") {
		t.Fatalf("past TTL with Vault down = %v, want ErrUnavailable naming the credential, not its value", err)
	}
}

func TestAppRoleLoginRenewalAndCatalogCheck(t *testing.T) {
	v := startVault(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	if err := root.Sys().EnableAuthWithOptions("approle", &vaultapi.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().PutPolicy("airlock-gw", `path "secret/data/airlock/*" { capabilities = ["read"] }`); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("auth/approle/role/gw", map[string]any{
		"token_policies": "airlock-gw", "token_ttl": "2s", "token_max_ttl": "10m",
	}); err != nil {
		t.Fatal(err)
	}
	rid, err := root.Logical().Read("auth/approle/role/gw/role-id")
	if err != nil {
		t.Fatal(err)
	}
	wrapping, _ := root.Clone()
	wrapping.SetToken(v.Token)
	wrapping.SetWrappingLookupFunc(func(string, string) string { return "60s" })
	wrapped, err := wrapping.Logical().Write("auth/approle/role/gw/secret-id", nil)
	if err != nil || wrapped.WrapInfo == nil {
		t.Fatalf("wrapped secret id: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(dir+"/role-id", []byte(rid.Data["role_id"].(string)+"\n"), 0o600)
	os.WriteFile(dir+"/secret-id", []byte(wrapped.WrapInfo.Token), 0o600)
	for _, p := range []string{"airlock/a", "airlock/b", "other/x"} {
		if err := v.SeedKV(ctx, p, map[string]any{"token": "value-of-" + p}); err != nil {
			t.Fatal(err)
		}
	}

	b, err := New(Config{Address: v.Addr, Auth: Auth{Method: "approle", RoleIDFile: dir + "/role-id", SecretIDFile: dir + "/secret-id", SecretIDWrapped: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	go b.Run(ctx)
	entry := func(name, path string) *broker.Entry {
		cat, err := broker.NewCatalog([]broker.Entry{{Name: name, Source: broker.Source{Kind: broker.SourceKV, Path: path, TTL: time.Millisecond},
			Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "{{.token}}"}, Hosts: []string{"a.example"}}})
		if err != nil {
			t.Fatal(err)
		}
		return cat[name]
	}
	if s, err := b.Get(ctx, broker.Lease{ID: "l"}, entry("a", "airlock/a")); err != nil || s["token"] != "value-of-airlock/a" {
		t.Fatalf("read after approle login: %v %v", s, err)
	}
	// The token lives 2s; past several lifetimes it still reads, because it is renewed.
	born := time.Now()
	waitFor(t, 30*time.Second, "the broker's token to be renewed past two of its lifetimes", func() bool {
		return b.renewals.Load() >= 3 && time.Since(born) > 4*time.Second
	})
	if s, err := b.Get(ctx, broker.Lease{ID: "l"}, entry("b", "airlock/b")); err != nil || s["token"] != "value-of-airlock/b" {
		t.Fatalf("read after the token's first TTL: %v %v", s, err)
	}
	if b.renewals.Load() == 0 {
		t.Fatal("the token was never renewed")
	}
	// The catalog check names the entry the gateway's policy cannot read; the rest work.
	cat, _ := broker.NewCatalog([]broker.Entry{
		{Name: "ok", Source: broker.Source{Kind: broker.SourceKV, Path: "airlock/a"}, Inject: broker.Injection{Kind: broker.InjectBasic}, Hosts: []string{"a.example"}},
		{Name: "forbidden", Source: broker.Source{Kind: broker.SourceKV, Path: "other/x"}, Inject: broker.Injection{Kind: broker.InjectBasic}, Hosts: []string{"a.example"}},
	})
	bad := b.CheckCatalog(ctx, cat)
	if len(bad) != 1 || bad["forbidden"] == nil || !strings.Contains(bad["forbidden"].Error(), `"forbidden"`) {
		t.Fatalf("catalog check: %v", bad)
	}
	// A wrapping token works once: a second broker with the same file cannot log in.
	b2, _ := New(Config{Address: v.Addr, Auth: Auth{Method: "approle", RoleIDFile: dir + "/role-id", SecretIDFile: dir + "/secret-id", SecretIDWrapped: true}})
	if err := b2.Login(ctx); err == nil || !strings.Contains(err.Error(), "unwrapping") {
		t.Fatalf("reused wrapping token: %v", err)
	}
}

func TestPerTaskTokens(t *testing.T) {
	v := startVault(t)
	ctx := context.Background()
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	root.Sys().PutPolicy("task-read", `path "secret/data/tasks/*" { capabilities = ["read"] }`)
	if _, err := root.Logical().Write("auth/token/roles/airlock-task", map[string]any{
		"allowed_policies": "task-read", "orphan": true, "token_explicit_max_ttl": "1h",
	}); err != nil {
		t.Fatal(err)
	}
	b, _ := New(Config{Address: v.Addr, Token: v.Token})
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	cat, err := broker.NewCatalog([]broker.Entry{{Name: "task", Source: broker.Source{Kind: broker.SourceToken, Role: "airlock-task",
		Policies: []string{"task-read"}, TTL: 10 * time.Minute}, Inject: broker.Injection{Kind: broker.InjectHeader, Header: "X-Vault-Token", Template: "{{.token}}"},
		Hosts: []string{"vault.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	e := cat["task"]
	if bad := b.CheckCatalog(ctx, cat); len(bad) != 0 {
		t.Fatalf("catalog check: %v", bad)
	}
	// 100 concurrent first requests of one lease mint one token.
	var wg sync.WaitGroup
	tokens := make(chan string, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := b.Get(ctx, broker.Lease{ID: "l-1"}, e)
			if err != nil {
				t.Error(err)
				return
			}
			tokens <- s["token"]
		}()
	}
	wg.Wait()
	close(tokens)
	first := <-tokens
	for tok := range tokens {
		if tok != first {
			t.Fatal("one lease got two tokens")
		}
	}
	if n := b.minted.Load(); n != 1 {
		t.Fatalf("minted %d tokens for 100 concurrent first requests", n)
	}
	other, err := b.Get(ctx, broker.Lease{ID: "l-2"}, e)
	if err != nil || other["token"] == first {
		t.Fatalf("a second lease shares the first lease's token: %v", err)
	}
	// Asked with the root token: a task token has no default policy, so not even lookup-self.
	lookup := func(tok string) (*vaultapi.Secret, error) { return root.Auth().Token().Lookup(tok) }
	info, err := lookup(first)
	if err != nil {
		t.Fatalf("the task token does not work: %v", err)
	}
	if ttl, _ := info.TokenTTL(); ttl > 10*time.Minute {
		t.Fatalf("task token TTL %s exceeds the entry's 10m", ttl)
	}
	if pols, _ := info.TokenPolicies(); len(pols) != 1 || pols[0] != "task-read" {
		t.Fatalf("task token policies %v", pols)
	}
	// A lease with 90s left gets a token that lives no longer than the lease.
	short, err := b.Get(ctx, broker.Lease{ID: "l-short", Expires: time.Now().Add(90 * time.Second)}, e)
	if err != nil {
		t.Fatal(err)
	}
	sinfo, _ := lookup(short["token"])
	if ttl, _ := sinfo.TokenTTL(); ttl > 90*time.Second || ttl < 80*time.Second {
		t.Fatalf("token for a lease with 90s left lives %s", ttl)
	}
	// Release revokes: Vault itself no longer knows the token; the other lease's still works.
	if err := b.Release(ctx, "l-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := lookup(first); err == nil {
		t.Fatal("the released lease's token still works")
	}
	if _, err := lookup(other["token"]); err != nil {
		t.Fatalf("releasing one lease revoked another's token: %v", err)
	}
	if _, err := b.Get(ctx, broker.Lease{ID: "l-1"}, e); err == nil {
		t.Fatal("a released lease got a new token")
	}
}

func TestPerTaskClientCertificates(t *testing.T) {
	v := startVault(t)
	ctx := context.Background()
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	if err := root.Sys().Mount("pki", &vaultapi.MountInput{Type: "pki", Config: vaultapi.MountConfigInput{MaxLeaseTTL: "87600h"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("pki/root/generate/internal", map[string]any{"common_name": "airlock test CA", "ttl": "87600h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("pki/roles/task", map[string]any{"allow_any_name": true, "client_flag": true, "server_flag": false, "max_ttl": "1h"}); err != nil {
		t.Fatal(err)
	}
	b, _ := New(Config{Address: v.Addr, Token: v.Token})
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	cat, err := broker.NewCatalog([]broker.Entry{{Name: "mtls", Source: broker.Source{Kind: broker.SourcePKI, Role: "task", TTL: 10 * time.Minute},
		Inject: broker.Injection{Kind: broker.InjectClientCert}, Hosts: []string{"mtls.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	if bad := b.CheckCatalog(ctx, cat); len(bad) != 0 {
		t.Fatalf("catalog check: %v", bad)
	}
	s, err := b.Get(ctx, broker.Lease{ID: "l-1"}, cat["mtls"])
	if err != nil {
		t.Fatal(err)
	}
	cert, err := s.ClientCertificate()
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	if leaf.Subject.CommonName != "airlock-l-1" || time.Until(leaf.NotAfter) > 11*time.Minute {
		t.Fatalf("certificate CN %q, expires in %s", leaf.Subject.CommonName, time.Until(leaf.NotAfter))
	}
	// An mTLS upstream that trusts only Vault's CA accepts it.
	caPEM, _ := root.Logical().Read("pki/cert/ca")
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM([]byte(caPEM.Data["certificate"].(string)))
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	up.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	up.StartTLS()
	defer up.Close()
	hc := up.Client()
	hc.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	resp, err := hc.Get(up.URL)
	if err != nil {
		t.Fatalf("mTLS upstream refused Vault's certificate: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "airlock-l-1" {
		t.Fatalf("mTLS upstream saw %q", body)
	}
	if err := b.Release(ctx, "l-1"); err != nil {
		t.Fatal(err)
	}
	// Revoked: the CA's revocation list names the serial once Vault has rebuilt it, which it
	// does beside the revocation (a read right after was seen to miss it).
	waitFor(t, 10*time.Second, "the revocation list to name the released lease's certificate", func() bool {
		crl, err := root.Logical().Read("pki/cert/crl")
		if err != nil || crl == nil {
			return false
		}
		pemCRL, _ := crl.Data["certificate"].(string)
		blk, _ := pem.Decode([]byte(pemCRL))
		if blk == nil {
			return false
		}
		list, err := x509.ParseRevocationList(blk.Bytes)
		if err != nil {
			return false
		}
		for _, e := range list.RevokedCertificateEntries {
			if e.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
				return true
			}
		}
		return false
	})
}

// appRoleBroker makes an AppRole with policy (HCL) in the dev Vault and returns a broker logged
// in with it (an entity-bearing login, unlike the root token).
func appRoleBroker(t *testing.T, v *devstack.Vault, root *vaultapi.Client, policy string) *Broker {
	t.Helper()
	if err := root.Sys().EnableAuthWithOptions("approle", &vaultapi.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().PutPolicy("gw", policy); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("auth/approle/role/gw", map[string]any{"token_policies": "gw"}); err != nil {
		t.Fatal(err)
	}
	rid, _ := root.Logical().Read("auth/approle/role/gw/role-id")
	sid, err := root.Logical().Write("auth/approle/role/gw/secret-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(dir+"/role-id", []byte(rid.Data["role_id"].(string)), 0o600)
	os.WriteFile(dir+"/secret-id", []byte(sid.Data["secret_id"].(string)), 0o600)
	b, _ := New(Config{Address: v.Addr, Auth: Auth{Method: "approle", RoleIDFile: dir + "/role-id", SecretIDFile: dir + "/secret-id"}})
	if err := b.Login(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOIDCIdentityTokens(t *testing.T) {
	v := startVault(t)
	ctx := context.Background()
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	if _, err := root.Logical().Write("identity/oidc/key/airlock", map[string]any{"allowed_client_ids": "*", "algorithm": "RS256"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("identity/oidc/role/upstream", map[string]any{"key": "airlock", "ttl": "5m"}); err != nil {
		t.Fatal(err)
	}
	role, _ := root.Logical().Read("identity/oidc/role/upstream")
	clientID, _ := role.Data["client_id"].(string)
	b := appRoleBroker(t, v, root, `path "identity/oidc/token/upstream" { capabilities = ["read"] }`)
	cat, err := broker.NewCatalog([]broker.Entry{{Name: "id", Source: broker.Source{Kind: broker.SourceOIDC, Role: "upstream"},
		Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "Bearer {{.token}}"}, Hosts: []string{"api.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	if bad := b.CheckCatalog(ctx, cat); len(bad) != 0 {
		t.Fatalf("catalog check: %v", bad)
	}
	s, err := b.Get(ctx, broker.Lease{ID: "l-1"}, cat["id"])
	if err != nil {
		t.Fatal(err)
	}
	// The upstream's check: signature against Vault's published keys, audience, expiry.
	resp, err := http.Get(v.Addr + "/v1/identity/oidc/.well-known/keys")
	if err != nil {
		t.Fatal(err)
	}
	var jwks struct {
		Keys []struct{ Kid, N, E string } `json:"keys"`
	}
	json.NewDecoder(resp.Body).Decode(&jwks)
	resp.Body.Close()
	claims := jwt.MapClaims{}
	_, err = jwt.ParseWithClaims(s["token"], claims, func(tok *jwt.Token) (any, error) {
		for _, k := range jwks.Keys {
			if k.Kid == tok.Header["kid"] {
				n, _ := base64.RawURLEncoding.DecodeString(k.N)
				e, _ := base64.RawURLEncoding.DecodeString(k.E)
				return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
			}
		}
		return nil, fmt.Errorf("no key %v", tok.Header["kid"])
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(clientID), jwt.WithExpirationRequired())
	if err != nil {
		t.Fatalf("the identity token does not verify against Vault's keys: %v", err)
	}
	if sub, _ := claims.GetSubject(); sub == "" {
		t.Fatal("identity token without a subject (entity)")
	}
	// Cached: a second request costs no Vault call and gets the same token.
	if s2, _ := b.Get(ctx, broker.Lease{ID: "l-2"}, cat["id"]); s2["token"] != s["token"] {
		t.Fatal("identity token not cached")
	}
	// With the root token (no entity) Vault refuses, and the catalog check names the entry.
	rb, _ := New(Config{Address: v.Addr, Token: v.Token})
	rb.Login(ctx)
	if bad := rb.CheckCatalog(ctx, cat); bad["id"] == nil {
		t.Fatal("catalog check passed an identity token Vault cannot issue for this login")
	}
}

func TestJWTLogin(t *testing.T) {
	v := startVault(t)
	ctx := context.Background()
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err := root.Sys().EnableAuthWithOptions("jwt", &vaultapi.EnableAuthOptions{Type: "jwt"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("auth/jwt/config", map[string]any{
		"jwt_validation_pubkeys": []string{string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))},
		"bound_issuer":           "https://ci.example",
	}); err != nil {
		t.Fatal(err)
	}
	root.Sys().PutPolicy("gw", `path "secret/data/airlock/*" { capabilities = ["read"] }`)
	if _, err := root.Logical().Write("auth/jwt/role/gateway", map[string]any{
		"role_type": "jwt", "user_claim": "sub", "bound_audiences": "vault", "token_policies": "gw", "token_ttl": "1h",
	}); err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": "https://ci.example", "sub": "airlock-gateway", "aud": "vault",
		"iat": time.Now().Unix(), "exp": time.Now().Add(10 * time.Minute).Unix(),
	})
	signed, _ := tok.SignedString(key)
	dir := t.TempDir()
	os.WriteFile(dir+"/jwt", []byte(signed), 0o600)
	v.SeedKV(ctx, "airlock/j", map[string]any{"token": "value-j"})

	b, _ := New(Config{Address: v.Addr, Auth: Auth{Method: "jwt", Role: "gateway", JWTFile: dir + "/jwt"}})
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	cat, _ := broker.NewCatalog([]broker.Entry{{Name: "j", Source: broker.Source{Kind: broker.SourceKV, Path: "airlock/j"},
		Inject: broker.Injection{Kind: broker.InjectBasic}, Hosts: []string{"a.example"}}})
	if s, err := b.Get(ctx, broker.Lease{ID: "l"}, cat["j"]); err != nil || s["token"] != "value-j" {
		t.Fatalf("read after jwt login: %v %v", s, err)
	}
	// A JWT from another key is refused by Vault.
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forged, _ := tok.SignedString(other)
	os.WriteFile(dir+"/jwt", []byte(forged), 0o600)
	b2, _ := New(Config{Address: v.Addr, Auth: Auth{Method: "jwt", Role: "gateway", JWTFile: dir + "/jwt"}})
	if err := b2.Login(ctx); err == nil {
		t.Fatal("a JWT signed by an unknown key logged in")
	}
}

func TestKVRefreshedInTheBackground(t *testing.T) {
	v := startVault(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v.SeedKV(ctx, "airlock/r", map[string]any{"token": "old-value"})
	b, _ := New(Config{Address: v.Addr, Token: v.Token})
	b.Login(ctx)
	go b.Run(ctx)
	cat, _ := broker.NewCatalog([]broker.Entry{{Name: "r", Source: broker.Source{Kind: broker.SourceKV, Path: "airlock/r", TTL: 2 * time.Second},
		Inject: broker.Injection{Kind: broker.InjectBasic}, Hosts: []string{"a.example"}}})
	if s, _ := b.Get(ctx, broker.Lease{ID: "l"}, cat["r"]); s["token"] != "old-value" {
		t.Fatalf("first read %v", s)
	}
	v.SeedKV(ctx, "airlock/r", map[string]any{"token": "new-value"})
	// In the last fifth of the TTL (at least two ticks before it ends) the refresher reads it
	// again: the cache holds the new value while the entry is still fresh, so no request waits
	// on Vault.
	var got any
	var fresh bool
	err := waitUntil(10*time.Second, "the refresher to put the new value in the cache", func() bool {
		b.mu.Lock()
		ent := b.cache["secret\x00airlock/r"]
		b.mu.Unlock()
		ent.mu.Lock()
		defer ent.mu.Unlock()
		got, fresh = ent.secret["token"], b.now().Before(ent.expires)
		return got == "new-value" || !fresh
	})
	if err != nil || got != "new-value" || !fresh {
		t.Fatalf("cache holds %q (fresh %v), want the refreshed value before the old one expired (%v)", got, fresh, err)
	}
}

// TestReloginAndRecovery: when the gateway's token reaches its max TTL the broker logs in again;
// when Vault goes away requests needing it fail with 503 naming the credential, and when Vault
// comes back they work again with nothing restarted.
func TestReloginAndRecovery(t *testing.T) {
	bin, _ := filepath.Abs("../../../bin/vault")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port := freeTCPPort(t)
	addr, tok := fmt.Sprintf("127.0.0.1:%d", port), "dev-recovery-token"
	v, err := devstack.StartVaultAt(ctx, bin, t.TempDir(), addr, tok)
	if err != nil {
		t.Fatal(err)
	}
	setup := func(v *devstack.Vault) {
		root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
		root.SetToken(v.Token)
		root.Sys().PutPolicy("gw", `path "secret/data/airlock/*" { capabilities = ["read"] }`)
		v.SeedKV(ctx, "airlock/x", map[string]any{"token": "x-value"})
	}
	setup(v)
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	b := appRoleBroker(t, v, root, `path "secret/data/airlock/*" { capabilities = ["read"] }`)
	// Short-lived logins: 2s TTL, 4s max, so renewal must give up and Run log in again.
	root.Logical().Write("auth/approle/role/gw", map[string]any{"token_policies": "gw", "token_ttl": "2s", "token_max_ttl": "4s"})
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	go b.Run(ctx)
	cat, _ := broker.NewCatalog([]broker.Entry{{Name: "x", Source: broker.Source{Kind: broker.SourceKV, Path: "airlock/x", TTL: time.Millisecond},
		Inject: broker.Injection{Kind: broker.InjectBasic}, Hosts: []string{"a.example"}}})
	waitFor(t, 30*time.Second, "the broker to log in again after its token's max TTL of 4s", func() bool { return b.logins.Load() > 0 })
	if _, err := b.Get(ctx, broker.Lease{ID: "l"}, cat["x"]); err != nil {
		t.Fatalf("read after re-login: %v", err)
	}

	// Vault goes away.
	v.Stop() // waits for the server to exit
	_, err = b.Get(ctx, broker.Lease{ID: "l"}, cat["x"])
	if !errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("with Vault down: %v", err)
	}
	// Vault comes back (a dev server comes back empty: the operator's setup runs again).
	v2, err := devstack.StartVaultAt(ctx, bin, t.TempDir(), addr, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Stop()
	setup(v2)
	root2, _ := vaultapi.NewClient(&vaultapi.Config{Address: v2.Addr})
	root2.SetToken(v2.Token)
	appRoleBroker(t, v2, root2, `path "secret/data/airlock/*" { capabilities = ["read"] }`) // recreates the role
	// The old role and secret ids are gone with the old server, so hand the broker new ones by
	// pointing its files at them, as an operator's rotation would.
	rid, _ := root2.Logical().Read("auth/approle/role/gw/role-id")
	sid, _ := root2.Logical().Write("auth/approle/role/gw/secret-id", nil)
	os.WriteFile(b.auth.RoleIDFile, []byte(rid.Data["role_id"].(string)), 0o600)
	os.WriteFile(b.auth.SecretIDFile, []byte(sid.Data["secret_id"].(string)), 0o600)
	waitFor(t, 30*time.Second, "reads to work again once Vault is back", func() bool {
		s, err := b.Get(ctx, broker.Lease{ID: "l"}, cat["x"])
		return err == nil && s["token"] == "x-value"
	})
}

// waitUntil is wait.Until.
var waitUntil = wait.Until

// waitFor is wait.For.
var waitFor = wait.For

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
