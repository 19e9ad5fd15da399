package pool_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/devstack"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/pooltest"
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
	r, err := devstack.StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("redis-server: %v (make test installs it)", err)
	}
	defer r.Stop()
	opts, _ := redis.ParseURL(r.URL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	store := redisstore.New(rdb, "b:")
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
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	node := func(name string) *pool.Manager {
		cache := binding.NewCache(name, store, 0)
		go cache.Run(ctx)
		m, err := pool.New(pool.Config{Node: name, Templates: []pool.Template{pooltest.Template(base)}, Runtime: &pooltest.Runtime{}, Store: store,
			Binder: cache, Audit: audit.Discard{}, Verify: v.VerifyFor, CheckTask: checkTask, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return m
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
