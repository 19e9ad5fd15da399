package mcpserver_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/mcpserver"
	"github.com/airlock-dev/airlock/pool"
)

// snapshotNode is node's API over a pool that keeps snapshots: a directory store, its data
// keys wrapped by a real Vault's transit engine (bin/vault, which `make test` builds).
func snapshotNode(t *testing.T) (*pooltest.Env, *pooltest.Workspaces, *httptest.Server) {
	t.Helper()
	catalog := pooltest.Catalog(t, "../bin/vault")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ws := pooltest.NewWorkspaces()
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 3, MaxTotal: 10}},
		Runtime: func(rt *pooltest.Runtime) { rt.ExecFunc = ws.Exec },
		Pool:    func(c *pool.Config) { c.Snapshots = catalog }})
	srv := httptest.NewServer(api.New(api.Config{Pool: e.Manager, Logger: quiet,
		Keys: map[string]string{api.HashKey("key-acme"): "acme"}, Minter: devMinter{e.Issuer}}))
	t.Cleanup(srv.Close)
	e.MustWarm(t, 3)
	return e, ws, srv
}

// TestStateOnTheNode: the state tools against the node's own API over a pool that keeps
// snapshots: a workspace is snapshotted, listed, forked into two sandboxes that each start with
// it, paused, listed as paused, resumed with a token for its task holding what it held, and the
// snapshot deleted.
func TestStateOnTheNode(t *testing.T) {
	e, ws, srv := snapshotNode(t)
	cs := connect(t, mcpserver.New(mcpserver.Config{Addr: srv.URL, Key: "key-acme"}), nil)
	defer cs.Close()
	ctx := context.Background()
	sandboxOf := func(lease string) string {
		t.Helper()
		l, err := e.Manager.Get(ctx, "acme", lease)
		if err != nil {
			t.Fatal(err)
		}
		return l.Sandbox.ID
	}

	var sb mcpserver.SandboxOut
	if msg := call(t, cs, "sandbox_create", map[string]any{"allow": []string{"a.example"}}, &sb); msg != "" {
		t.Fatal(msg)
	}
	ws.Put(sandboxOf(sb.Lease), "workspace/plan.txt", "step 1\n")

	var snap apitype.SnapshotView
	if msg := call(t, cs, "sandbox_snapshot", map[string]any{"lease": sb.Lease, "name": "green"}, &snap); msg != "" {
		t.Fatal(msg)
	}
	if !strings.HasPrefix(snap.ID, "sha256:") || snap.Name != "green" || snap.Lease != sb.Lease || snap.Tenant != "acme" || snap.Files < 2 || snap.Stored <= snap.Size {
		t.Errorf("sandbox_snapshot: %+v", snap)
	}
	var list mcpserver.SnapshotListOut
	call(t, cs, "snapshot_list", nil, &list)
	if len(list.Snapshots) != 1 || list.Snapshots[0].ID != snap.ID {
		t.Errorf("snapshot_list: %+v", list)
	}

	// Forks: each sandbox from the snapshot starts with its workspace, of its template.
	for _, ref := range []string{"green", snap.ID} {
		var fork mcpserver.SandboxOut
		if msg := call(t, cs, "sandbox_create", map[string]any{"from": ref, "allow": []string{"a.example"}}, &fork); msg != "" {
			t.Fatalf("from %s: %s", ref, msg)
		}
		if r := fork.Restored; r == nil || r.Snapshot != snap.ID || r.Files != snap.Files || fork.Template != "default" {
			t.Errorf("from %s: %+v", ref, fork)
		}
		if got := ws.Get(sandboxOf(fork.Lease), "workspace/plan.txt"); got != "step 1\n" {
			t.Errorf("from %s: the sandbox holds %q", ref, got)
		}
	}

	// Pause: listed as paused; resumed with a token for its task, in a new sandbox holding what
	// the old one held.
	old := sandboxOf(sb.Lease)
	var p mcpserver.PauseOut
	if msg := call(t, cs, "sandbox_pause", map[string]any{"lease": sb.Lease, "memory": true}, &p); msg != "" {
		t.Fatal(msg)
	}
	if p.Kept != apitype.KeptFiles || p.Why == "" || p.Task != sb.Task || !p.Until.After(time.Now()) {
		t.Errorf("sandbox_pause: %+v", p)
	}
	var all mcpserver.ListOut
	call(t, cs, "sandbox_list", nil, &all)
	if i := slices.IndexFunc(all.Sandboxes, func(s mcpserver.SandboxOut) bool { return s.Lease == sb.Lease }); i < 0 || all.Sandboxes[i].State != "paused" {
		t.Errorf("sandbox_list after the pause: %+v", all)
	}
	tok, err := e.Issuer.Mint(p.Task, "acme", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var back mcpserver.SandboxOut
	if msg := call(t, cs, "sandbox_resume", map[string]any{"lease": sb.Lease, "token": tok}, &back); msg != "" {
		t.Fatalf("resume with a token for its task: %s", msg)
	}
	if back.Lease != sb.Lease || back.State != "running" || back.Restored == nil {
		t.Errorf("sandbox_resume: %+v", back)
	}
	if now := sandboxOf(sb.Lease); now == old || ws.Get(now, "workspace/plan.txt") != "step 1\n" {
		t.Errorf("resumed in sandbox %s (paused in %s), holding %q", now, old, ws.Get(now, "workspace/plan.txt"))
	}

	// A token that is not one for the paused lease's task is refused.
	var other mcpserver.SandboxOut
	call(t, cs, "sandbox_create", map[string]any{"allow": []string{"a.example"}}, &other)
	call(t, cs, "sandbox_pause", map[string]any{"lease": other.Lease}, nil)
	if msg := call(t, cs, "sandbox_resume", map[string]any{"lease": other.Lease, "token": tok}, nil); !strings.Contains(msg, "token_refused") {
		t.Errorf("resume with another task's token: %q", msg)
	}

	var done mcpserver.Done
	if msg := call(t, cs, "snapshot_delete", map[string]any{"snapshot": "green"}, &done); msg != "" || !done.OK {
		t.Fatalf("snapshot_delete: %q %+v", msg, done)
	}
	if msg := call(t, cs, "sandbox_create", map[string]any{"from": "green"}, nil); !strings.Contains(msg, "no_such_snapshot") {
		t.Errorf("from a deleted snapshot: %q", msg)
	}
}
