package vault

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/internal/devstack"
)

// psql runs a query against pg as user with password, returning its output.
func psql(pg *devstack.Postgres, user, password, query string) (string, error) {
	host, port, _ := net.SplitHostPort(pg.Addr)
	cmd := exec.Command("psql", "-h", host, "-p", port, "-U", user, "-d", "postgres", "-tAc", query)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+password, "PGCONNECT_TIMEOUT=5")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// databaseBroker runs PostgreSQL and a dev Vault whose database engine makes a PostgreSQL role
// per read of database/creds/task, with the default TTL given, and a broker logged in to it
// with a catalog of one dynamic credential "db".
func databaseBroker(t *testing.T, defaultTTL string) (*devstack.Postgres, *vaultapi.Client, *Broker, broker.Catalog) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pg, err := devstack.StartPostgres(ctx)
	if err != nil {
		t.Fatalf("postgres: %v (make test installs Debian's postgresql)", err)
	}
	t.Cleanup(pg.Close)
	v := startVault(t)
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	if err := root.Sys().Mount("database", &vaultapi.MountInput{Type: "database"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("database/config/pg", map[string]any{
		"plugin_name": "postgresql-database-plugin", "allowed_roles": "task",
		"connection_url": "postgresql://{{username}}:{{password}}@" + pg.Addr + "/postgres?sslmode=disable",
		"username":       "postgres", "password": pg.Password,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("database/roles/task", map[string]any{
		"db_name":             "pg",
		"creation_statements": `CREATE ROLE "{{name}}" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}';`,
		"default_ttl":         defaultTTL, "max_ttl": "1h",
	}); err != nil {
		t.Fatal(err)
	}
	b, _ := New(Config{Address: v.Addr, Token: v.Token})
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	go b.Run(ctx)
	cat, err := broker.NewCatalog([]broker.Entry{{Name: "db", Source: broker.Source{Kind: broker.SourceDynamic, Path: "database/creds/task"},
		Inject: broker.Injection{Kind: broker.InjectBasic}, Hosts: []string{"db-api.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	if bad := b.CheckCatalog(ctx, cat); len(bad) != 0 {
		t.Fatalf("catalog check: %v", bad)
	}
	return pg, root, b, cat
}

// roleCount is how many PostgreSQL roles are named user.
func roleCount(t *testing.T, pg *devstack.Postgres, user string) string {
	t.Helper()
	out, err := psql(pg, "postgres", pg.Password, "select count(*) from pg_roles where rolname = '"+user+"'")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDynamicSecretEndsWithItsLease: a dynamic secret read for a lease with seconds left is cut
// to the lease at once (the role's default is ten minutes) and its renewals never pass the
// lease's end, so even a revocation that never comes ends it with the lease.
func TestDynamicSecretEndsWithItsLease(t *testing.T) {
	pg, root, b, cat := databaseBroker(t, "10m")
	ctx := context.Background()
	end := time.Now().Add(6 * time.Second)
	s, err := b.Get(ctx, broker.Lease{ID: "l-short-db", Expires: end}, cat["db"])
	if err != nil {
		t.Fatal(err)
	}
	user := s["username"]
	if roleCount(t, pg, user) != "1" {
		t.Fatal("control: the task's role does not exist")
	}
	m := b.material(broker.Lease{ID: "l-short-db"})
	m.mu.Lock()
	leaseID := m.tokens["db"].item.Ref
	m.mu.Unlock()
	// What Vault says of it: it ends with the task's lease, not in ten minutes.
	info, err := root.Logical().Write("sys/leases/lookup", map[string]any{"lease_id": leaseID})
	if err != nil {
		t.Fatal(err)
	}
	if ttl, _ := asInt(info.Data["ttl"]); ttl > 7 {
		t.Fatalf("Vault gives the task's database lease %ds, for a task lease of 6s", ttl)
	}
	// No release: Vault itself ends it when the task's lease ends.
	waitFor(t, 20*time.Second, "the task's database role to go with its lease", func() bool { return roleCount(t, pg, user) == "0" })
	if time.Now().Before(end) {
		t.Fatal("the role went before the lease ended")
	}
	if _, err := root.Logical().Write("sys/leases/lookup", map[string]any{"lease_id": leaseID}); err == nil {
		t.Fatal("Vault still knows the task's database lease after the task's lease ended")
	}
}

// TestDynamicDatabaseCredentials: a per-task PostgreSQL user from Vault's database engine,
// injected as basic auth into a request to an upstream that proves it by logging in with it;
// renewed while the task runs and gone from PostgreSQL after release.
func TestDynamicDatabaseCredentials(t *testing.T) {
	ctx := context.Background()
	pg, _, b, cat := databaseBroker(t, "3s")
	// The upstream: logs in to PostgreSQL with the basic-auth credentials it received.
	var lastUser string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok {
			http.Error(w, "no credentials", http.StatusUnauthorized)
			return
		}
		lastUser = u
		out, err := psql(pg, u, p, "select current_user")
		if err != nil || out != u {
			http.Error(w, fmt.Sprintf("login failed: %v %s", err, out), http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "logged in as ", out)
	}))
	defer up.Close()
	request := func() (int, string) {
		s, err := b.Get(ctx, broker.Lease{ID: "l-db"}, cat["db"])
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", up.URL, nil)
		if _, err := cat["db"].Apply(req, s); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		fmt.Fscan(resp.Body, &sb)
		return resp.StatusCode, sb.String()
	}
	if st, body := request(); st != 200 {
		t.Fatalf("the upstream could not log in with the injected credential: %d %s", st, body)
	}
	user := lastUser
	// Its Vault lease lives 3s; past that it still works, renewed, and it is the same user.
	born := time.Now()
	waitFor(t, 30*time.Second, "the database lease to be renewed past its 3s TTL", func() bool {
		return b.renewals.Load() >= 2 && time.Since(born) > 4*time.Second
	})
	if st, body := request(); st != 200 || lastUser != user {
		t.Fatalf("after the first TTL: %d %s (user %s, was %s)", st, body, lastUser, user)
	}
	if b.renewals.Load() == 0 {
		t.Fatal("the database lease was never renewed")
	}
	// Release: Vault revokes the lease and drops the role from PostgreSQL.
	if err := b.Release(ctx, "l-db"); err != nil {
		t.Fatal(err)
	}
	if out := roleCount(t, pg, user); out != "0" {
		t.Fatalf("the task's database role survived the release: %s", out)
	}
}
