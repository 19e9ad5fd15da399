package pool_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/redisstore"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

// Bearer clients get no more than leased ones: a token presented to the gateway by a client
// outside the pool passes the same checks as a lease (its issuer may speak for its tenant, the
// deployment's policy) and is bound to one use of its jti, shared with leases and other nodes.
func TestAdmitBearerIsLeaseAdmission(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acme, _ := token.NewDevIssuer("acme-issuer", "aud")
	acmeIss := acme.Issuer(time.Hour)
	acmeIss.Tenants = []string{"acme"}
	v := &token.Verifier{Audience: "aud", Issuers: map[string]token.Issuer{"acme-issuer": acmeIss}}
	checkTask := func(t token.Task) error {
		for _, s := range t.Scopes {
			if s.Credential == "prod-db" && t.Tenant != "acme" {
				return errors.New("credential prod-db is not for tenant " + t.Tenant)
			}
		}
		return nil
	}
	var store *redisstore.Store
	node := func(name string) *pool.Manager {
		e := pooltest.NewEnv(t, pooltest.EnvConfig{Node: name, Store: store, NoRun: true, Templates: []pool.Template{base},
			Pool: func(c *pool.Config) { c.Verify, c.CheckTask = v.VerifyFor, checkTask }})
		store = e.Store
		return e.Manager
	}
	a, b := node("n1"), node("n2")
	mint := func(tenant string) string {
		tok, _ := acme.Mint("task-b", tenant, []scope.Scope{{Host: "a.example"}}, time.Minute)
		return tok
	}

	// An issuer bound to acme cannot speak for globex, and a token must say whom it speaks for.
	for _, c := range []struct{ tenant, want string }{{"globex", "may not speak for tenant"}, {"", "names none"}} {
		if _, err := a.AdmitBearer(ctx, mint(c.tenant)); !errors.Is(err, pool.ErrTokenRefused) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("bearer token for %q: %v", c.tenant, err)
		}
	}
	// The same token through a globex API key is refused at lease time too.
	if _, err := a.Lease(ctx, pool.LeaseRequest{Tenant: "globex", Template: "default", Token: mint("")}); !errors.Is(err, pool.ErrTokenRefused) {
		t.Fatalf("lease for globex with acme's issuer: %v", err)
	}

	// One use of the jti: the node that admitted it may again, no other node, and no lease.
	go a.Run(ctx)
	waitWarm(t, a, 1)
	tok := mint("acme")
	if _, err := a.AdmitBearer(ctx, tok); err != nil {
		t.Fatalf("bearer token for acme: %v", err)
	}
	if _, err := a.AdmitBearer(ctx, tok); err != nil {
		t.Fatalf("the same node admitting the token again: %v", err)
	}
	if _, err := b.AdmitBearer(ctx, tok); !errors.Is(err, pool.ErrTokenRefused) || !strings.Contains(err.Error(), "held by bearer:n1") {
		t.Fatalf("another node admitting a token already in use: %v", err)
	}
	if _, err := a.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok}); !errors.Is(err, pool.ErrJTIInUse) {
		t.Fatalf("leasing with a token a bearer client uses: %v", err)
	}
	// A token that binds a lease is not a bearer token.
	leased := mint("acme")
	if _, err := a.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: leased}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AdmitBearer(ctx, leased); !errors.Is(err, pool.ErrTokenRefused) || !strings.Contains(err.Error(), "held by l-") {
		t.Fatalf("bearer use of a token that binds a lease: %v", err)
	}
	// Deployment policy applies as at lease time.
	badPolicy, _ := acme.Mint("task-c", "globex", []scope.Scope{{Host: "db.example", Credential: "prod-db"}}, time.Minute)
	acmeIss.Tenants = []string{"acme", "globex"}
	v.Issuers["acme-issuer"] = acmeIss
	if _, err := a.AdmitBearer(ctx, badPolicy); !errors.Is(err, pool.ErrTokenRefused) || !strings.Contains(err.Error(), "prod-db") {
		t.Fatalf("bearer token the deployment policy refuses: %v", err)
	}
}

// A bearer token presented while the lease store is down is refused as the store's failure, not
// as the token's: the gateway answers 503 and the client is told nothing of the store's address.
func TestAdmitBearerStoreDown(t *testing.T) {
	iss, _ := token.NewDevIssuer("acme-issuer", "aud")
	accept := iss.Issuer(time.Hour)
	accept.Tenants = []string{"acme"}
	v := &token.Verifier{Audience: "aud", Issuers: map[string]token.Issuer{"acme-issuer": accept}}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Node: "n1", NoRun: true, Templates: []pool.Template{base},
		Pool: func(c *pool.Config) { c.Verify = v.VerifyFor }})
	tok, _ := iss.Mint("task-b", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	e.Redis.Stop()
	_, err := e.Manager.AdmitBearer(context.Background(), tok)
	if !errors.Is(err, binding.ErrUnavailable) || errors.Is(err, pool.ErrTokenRefused) {
		t.Fatalf("bearer token with the store down: %v, want the store unavailable", err)
	}
}
