package vault

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/devstack"
	"github.com/airlock-dev/airlock/gateway/broker"
)

// startVault runs a real Vault dev server from bin/vault (built by `make vault`).
func startVault(t *testing.T) *devstack.Vault {
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
	s, err := b.Get(ctx, "l-1", e)
	if err != nil || s["token"] != "first-value-123" {
		t.Fatalf("Get = %v, %v", s, err)
	}
	// A changed value is picked up only after the TTL.
	v.SeedKV(ctx, "airlock/gh", map[string]any{"token": "second-value-456"})
	if s, _ := b.Get(ctx, "l-1", e); s["token"] != "first-value-123" {
		t.Fatalf("cached value not served: %v", s)
	}
	now = now.Add(2 * time.Minute)
	if s, _ := b.Get(ctx, "l-1", e); s["token"] != "second-value-456" {
		t.Fatalf("value not refreshed after TTL: %v", s)
	}
	// Vault gone: the cached value serves until its TTL, never longer.
	v.Stop()
	if s, err := b.Get(ctx, "l-1", e); err != nil || s["token"] != "second-value-456" {
		t.Fatalf("within TTL with Vault down: %v, %v", s, err)
	}
	now = now.Add(2 * time.Minute)
	_, err = b.Get(ctx, "l-1", e)
	if !errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), `"gh"`) || strings.Contains(err.Error(), "second-value") {
		t.Fatalf("past TTL with Vault down = %v, want ErrUnavailable naming the credential, not its value", err)
	}
}
