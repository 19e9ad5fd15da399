package vault

import (
	"context"
	"fmt"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/pool/redisstore"
)

// benchBroker is a broker on a real Vault dev server with a KV secret and a task token role;
// journal, when set, keeps what it mints.
func benchBroker(b *testing.B, journal ...Journal) (*Broker, broker.Catalog) {
	b.Helper()
	v := startVault(b)
	ctx := context.Background()
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	root.Sys().PutPolicy("task-read", `path "secret/data/tasks/*" { capabilities = ["read"] }`)
	root.Logical().Write("auth/token/roles/airlock-task", map[string]any{"allowed_policies": "task-read", "orphan": true})
	v.SeedKV(ctx, "airlock/bench", map[string]any{"token": "bench-value"})
	cfg := Config{Address: v.Addr, Token: v.Token}
	if len(journal) > 0 {
		cfg.Journal = journal[0]
	}
	br, _ := New(cfg)
	if err := br.Login(ctx); err != nil {
		b.Fatal(err)
	}
	cat, err := broker.NewCatalog([]broker.Entry{
		{Name: "kv", Source: broker.Source{Kind: broker.SourceKV, Path: "airlock/bench", TTL: time.Hour},
			Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "Bearer {{.token}}"}, Hosts: []string{"a.example"}},
		{Name: "task", Source: broker.Source{Kind: broker.SourceToken, Role: "airlock-task", Policies: []string{"task-read"}},
			Inject: broker.Injection{Kind: broker.InjectHeader, Header: "X-Vault-Token", Template: "{{.token}}"}, Hosts: []string{"a.example"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return br, cat
}

// BenchmarkCredentialCached is the broker's share of a request whose credential is cached.
func BenchmarkCredentialCached(b *testing.B) {
	br, cat := benchBroker(b)
	ctx := context.Background()
	br.Get(ctx, broker.Lease{ID: "l"}, cat["kv"])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := br.Get(ctx, broker.Lease{ID: "l"}, cat["kv"]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFirstRequestOfATask is the broker's share of a task's first request for a per-task
// token: one Vault call that mints it.
func BenchmarkFirstRequestOfATask(b *testing.B) {
	br, cat := benchBroker(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		if _, err := br.Get(ctx, broker.Lease{ID: fmt.Sprintf("l-%d", i)}, cat["task"]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPerTaskReused is the broker's share of a task's later requests for its per-task
// token: the minted token is handed out again, with no Vault or journal call.
func BenchmarkPerTaskReused(b *testing.B) {
	br, cat := benchBroker(b)
	ctx := context.Background()
	l := broker.Lease{ID: "l", Expires: time.Now().Add(time.Hour)}
	if _, err := br.Get(ctx, l, cat["task"]); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := br.Get(ctx, l, cat["task"]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFirstRequestOfATaskJournaled is BenchmarkFirstRequestOfATask with the node's journal
// in a real Redis: the Vault call plus one write that records what it minted.
func BenchmarkFirstRequestOfATaskJournaled(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := devstack.StartRedis(ctx, b.TempDir())
	if err != nil {
		b.Fatalf("redis-server: %v", err)
	}
	defer r.Stop()
	opts, _ := redis.ParseURL(r.URL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	br, cat := benchBroker(b, redisstore.New(rdb, "b:").Journal("minted:n1"))
	i := 0
	for b.Loop() {
		i++
		if _, err := br.Get(ctx, broker.Lease{ID: fmt.Sprintf("l-%d", i)}, cat["task"]); err != nil {
			b.Fatal(err)
		}
	}
}
