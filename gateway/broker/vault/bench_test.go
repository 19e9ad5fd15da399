package vault

import (
	"context"
	"fmt"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/gateway/broker"
)

// benchBroker is a broker on a real Vault dev server with a KV secret and a task token role.
func benchBroker(b *testing.B) (*Broker, broker.Catalog) {
	b.Helper()
	v := startVault(b)
	ctx := context.Background()
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	root.Sys().PutPolicy("task-read", `path "secret/data/tasks/*" { capabilities = ["read"] }`)
	root.Logical().Write("auth/token/roles/airlock-task", map[string]any{"allowed_policies": "task-read", "orphan": true})
	v.SeedKV(ctx, "airlock/bench", map[string]any{"token": "bench-value"})
	br, _ := New(Config{Address: v.Addr, Token: v.Token})
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
