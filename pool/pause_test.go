package pool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/snapshot"
)

// pauseNode is a pool whose sandboxes' files are pooltest.Workspaces, keeping its state in a
// catalog over a real Vault, counting what it revokes and releases.
type pauseNode struct {
	e                 *pooltest.Env
	ws                *pooltest.Workspaces
	store             string // the catalog's directory
	scratch           string // where checkpoints are written (memory_test.go)
	revoked, released atomic.Int32
}

func newPauseNode(t *testing.T, maxPaused time.Duration) *pauseNode {
	t.Helper()
	n := &pauseNode{ws: pooltest.NewWorkspaces(), store: t.TempDir()}
	catalog := pooltest.CatalogAt(t, "../bin/vault", n.store)
	n.e = pooltest.NewEnv(t, pooltest.EnvConfig{
		Templates: []pool.Template{{MinWarm: 2, MaxTotal: 10, Snapshot: pool.SnapshotPolicy{MaxPaused: maxPaused}}},
		Runtime:   func(rt *pooltest.Runtime) { rt.ExecFunc = n.ws.Exec },
		Pool: func(c *pool.Config) {
			c.Snapshots = catalog
			c.Revoke = func(context.Context, string) error { n.revoked.Add(1); return nil }
			c.Release = func(context.Context, string) error { n.released.Add(1); return nil }
		}})
	n.e.MustWarm(t, 2)
	return n
}

// lease leases a sandbox of the default template for acme's task-1.
func (n *pauseNode) lease(t *testing.T) pool.Lease {
	t.Helper()
	l, err := n.e.Manager.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: n.token(t, "task-1", "acme")})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (n *pauseNode) token(t *testing.T, task, tenant string) string {
	t.Helper()
	tok, err := n.e.Issuer.Mint(task, tenant, []scope.Scope{{Host: "a.example"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// A pause keeps the files, ends the sandbox and the binding and revokes (so the broker may mint
// again, unlike a release); the lease is listed paused; a resume with a token of another task
// is refused and does not hold back the right one, which brings the files back in a new
// sandbox under the lease's own id; a pause of a paused lease and a resume of a running one
// are refused as the wrong state.
func TestPauseAndResume(t *testing.T) {
	n := newPauseNode(t, time.Hour)
	ctx := context.Background()
	m := n.e.Manager
	l, err := m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: n.token(t, "task-1", "acme")})
	if err != nil {
		t.Fatal(err)
	}
	n.ws.Put(l.Sandbox.ID, "workspace/notes.txt", "kept across the pause")
	if _, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")}); !errors.Is(err, pool.ErrLeaseState) {
		t.Fatalf("a resume of a running lease: %v; want ErrLeaseState", err)
	}
	p, err := m.Pause(ctx, "acme", l.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kept != apitype.KeptFiles || p.Why == "" || p.Snapshot == "" {
		t.Fatalf("the pause: %+v; want kept files, and why memory was not", p)
	}
	if !n.e.Runtime.Destroyed(l.Sandbox.ID) || n.revoked.Load() != 1 || n.released.Load() != 0 {
		t.Fatalf("after the pause: sandbox destroyed %v, revoked %d, released %d; want destroyed, revoked once, never released",
			n.e.Runtime.Destroyed(l.Sandbox.ID), n.revoked.Load(), n.released.Load())
	}
	if _, err := m.Get(ctx, "acme", l.ID); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("the paused lease in the table: %v; want it gone (no binding)", err)
	}
	if _, err := m.Pause(ctx, "acme", l.ID, false); !errors.Is(err, pool.ErrLeaseState) {
		t.Fatalf("a pause of a paused lease: %v; want ErrLeaseState", err)
	}
	if all, _ := m.PausedLeases(ctx, "acme"); len(all) != 1 || all[0].Lease != l.ID {
		t.Fatalf("acme's paused leases: %+v", all)
	}
	if all, _ := m.PausedLeases(ctx, "globex"); len(all) != 0 {
		t.Fatalf("globex sees acme's paused lease: %+v", all)
	}
	if _, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "globex", Lease: l.ID, Token: n.token(t, "task-1", "globex")}); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("globex resuming acme's lease: %v; want ErrLeaseNotFound", err)
	}
	if _, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-2", "acme")}); !errors.Is(err, pool.ErrTokenRefused) {
		t.Fatalf("a resume with another task's token: %v; want ErrTokenRefused", err)
	}
	r, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")})
	if err != nil {
		t.Fatalf("the right resume after a refused one: %v", err)
	}
	if r.ID != l.ID || r.Sandbox.ID == l.Sandbox.ID || r.Restored == nil {
		t.Fatalf("the resumed lease: id %s sandbox %s restored %v; want id %s in a new sandbox, restored", r.ID, r.Sandbox.ID, r.Restored, l.ID)
	}
	if got := n.ws.Get(r.Sandbox.ID, "workspace/notes.txt"); got != "kept across the pause" {
		t.Fatalf("the resumed sandbox's notes: %q", got)
	}
	if all, _ := m.PausedLeases(ctx, "acme"); len(all) != 0 {
		t.Fatalf("still paused after the resume: %+v", all)
	}
	if _, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")}); !errors.Is(err, pool.ErrLeaseState) {
		t.Fatalf("a second resume: %v; want ErrLeaseState", err)
	}
	// Paused and resumed again at once: the first resume's claim does not hold the second back.
	if _, err := m.Pause(ctx, "acme", l.ID, false); err != nil {
		t.Fatalf("a second pause: %v", err)
	}
	if _, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")}); err != nil {
		t.Fatalf("the resume of a second pause, right after the first resume: %v", err)
	}
}

// A lease paused past its template's max_paused is released by the manager's pass: deleted,
// or kept as the tenant's snapshot "paused-LEASE" when its pause asked.
func TestPausedLeasesExpire(t *testing.T) {
	n := newPauseNode(t, time.Millisecond)
	ctx := context.Background()
	m := n.e.Manager
	var leases []pool.Lease
	for i, task := range []string{"task-drop", "task-keep"} {
		l, err := m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: n.token(t, task, "acme")})
		if err != nil {
			t.Fatal(err)
		}
		n.ws.Put(l.Sandbox.ID, "workspace/f", task)
		if _, err := m.PauseWith(ctx, "acme", l.ID, pool.PauseOptions{Keep: i == 1}); err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	pool.ReapPaused(m, "acme")
	if all, _ := m.PausedLeases(ctx, "acme"); len(all) != 0 {
		t.Fatalf("paused past max_paused and still paused: %+v", all)
	}
	if _, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: leases[0].ID, Token: n.token(t, "task-drop", "acme")}); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("resuming an expired pause: %v", err)
	}
	kept, err := m.SnapshotInfo(ctx, "acme", "paused-"+leases[1].ID)
	if err != nil {
		t.Fatalf("the pause that asked to be kept: %v", err)
	}
	l, err := m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: n.token(t, "task-3", "acme"), From: kept.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.ws.Get(l.Sandbox.ID, "workspace/f"); got != "task-keep" {
		t.Fatalf("a lease from the kept pause holds %q", got)
	}
	if _, err := m.SnapshotInfo(ctx, "acme", "paused-"+leases[0].ID); err == nil {
		t.Fatalf("the pause that did not ask to be kept was kept")
	}
}

// A snapshot whose blob was swapped in the store for another of the same tenant (both
// encrypted under its key, so each decrypts) restores nothing: its archive does not hash to its
// id, which the restore reads to the end for, and the lease is refused with its sandbox
// destroyed.
func TestSwappedSnapshotRefused(t *testing.T) {
	n := newPauseNode(t, time.Hour)
	ctx := context.Background()
	m := n.e.Manager
	var ids []string
	for _, content := range []string{"first", "second"} {
		l, err := m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: n.token(t, "task-"+content, "acme")})
		if err != nil {
			t.Fatal(err)
		}
		n.ws.Put(l.Sandbox.ID, "workspace/f", content)
		s, err := m.Snapshot(ctx, "acme", l.ID, pool.SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, strings.TrimPrefix(s.ID, "sha256:"))
	}
	blobs, _ := filepath.Glob(filepath.Join(n.store, "tenants", "*", "blobs"))
	if len(blobs) != 1 {
		t.Fatalf("the store's blob folders: %v", blobs)
	}
	second, err := os.ReadFile(filepath.Join(blobs[0], ids[1]))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(blobs[0], ids[0]), second, 0o600); err != nil {
		t.Fatal(err)
	}
	destroyed := func() int { return n.e.Runtime.Created() - n.e.Runtime.Alive() }
	before := destroyed()
	_, err = m.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: n.token(t, "task-3", "acme"), From: "sha256:" + ids[0]})
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "verify") {
		t.Fatalf("a lease from a swapped snapshot: %v; want ErrCorrupt saying it does not verify", err)
	}
	wait.For(t, 10*time.Second, "the sandbox the refused restore claimed to be destroyed", func() bool {
		return destroyed() > before
	})
}
