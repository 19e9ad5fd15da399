package pool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/snapshot"
)

// pipFile is a file of the python template's pip cache, as the fake sandboxes name paths
// (relative to /).
const pipFile = "workspace/.cache/pip/http/wheel"

// cacheNode is a pool that keeps snapshots (a directory store, data keys wrapped by a real
// Vault's transit engine) over sandboxes whose files are a pooltest.Workspaces, with two
// templates that each keep a pip cache per tenant (python also has a seeded one) and one that
// keeps none. Every record written is kept.
type cacheNode struct {
	e    *pooltest.Env
	ws   *pooltest.Workspaces
	sink *recordSink
	// failRestore, when set, makes every restore in a sandbox exit 46 (a link the image left).
	failRestore chan struct{}
}

func newCacheNode(t *testing.T) *cacheNode {
	t.Helper()
	n := &cacheNode{ws: pooltest.NewWorkspaces(), sink: &recordSink{}, failRestore: make(chan struct{})}
	catalog := pooltest.Catalog(t, "../bin/vault")
	pip := pool.Cache{Name: "pip", Path: "~/.cache/pip", MaxMB: 1}
	n.e = pooltest.NewEnv(t, pooltest.EnvConfig{
		Templates: []pool.Template{
			{Name: "python", MinWarm: 2, MaxTotal: 10, Caches: []pool.Cache{pip, {Name: "wheels", Path: "/opt/wheels", Mode: pool.CacheSeeded}}},
			{Name: "node", MinWarm: 1, MaxTotal: 10, Caches: []pool.Cache{pip}},
			{Name: "plain", MinWarm: 1, MaxTotal: 10},
		},
		Runtime: func(rt *pooltest.Runtime) {
			rt.ExecFunc = func(ctx context.Context, sb pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
				select {
				case <-n.failRestore:
					if len(req.Cmd) > 3 && req.Cmd[3] == "restore" {
						io.WriteString(stderr, "a link leads out")
						return 46, nil
					}
				default:
				}
				return n.ws.Exec(ctx, sb, req, stdin, stdout, stderr)
			}
		},
		Pool: func(c *pool.Config) { c.Snapshots, c.Audit = catalog, n.sink }})
	n.e.MustWarm(t, 1)
	return n
}

// lease leases template for tenant with the cache flags of req.
func (n *cacheNode) lease(t *testing.T, tenant, template string, req pool.LeaseRequest) pool.Lease {
	t.Helper()
	l, err := n.e.Manager.Lease(context.Background(), n.request(t, tenant, template, req))
	if err != nil {
		t.Fatalf("lease of %s for %s: %v", template, tenant, err)
	}
	return l
}

func (n *cacheNode) request(t *testing.T, tenant, template string, req pool.LeaseRequest) pool.LeaseRequest {
	t.Helper()
	tok, err := n.e.Issuer.Mint(fmt.Sprintf("task-%d", time.Now().UnixNano()), tenant, []scope.Scope{{Host: "a.example"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req.Tenant, req.Template, req.Token = tenant, template, tok
	return req
}

func (n *cacheNode) release(t *testing.T, l pool.Lease) {
	t.Helper()
	if err := n.e.Manager.Release(context.Background(), l.Tenant, l.ID); err != nil {
		t.Fatalf("release of %s: %v", l.ID, err)
	}
	if err := n.e.Manager.AwaitEnd(context.Background(), l.Tenant, l.ID); err != nil {
		t.Fatalf("the end of %s: %v", l.ID, err)
	}
}

// seed leases python for tenant asking to write its caches back, leaves content in its pip
// cache and releases it: the tenant's cache then holds content.
func (n *cacheNode) seed(t *testing.T, tenant, template, content string) pool.Lease {
	t.Helper()
	l := n.lease(t, tenant, template, pool.LeaseRequest{WriteCaches: true})
	n.ws.Put(l.Sandbox.ID, pipFile, content)
	n.release(t, l)
	return l
}

// cacheRecords are the cache records of lease with event.
func (n *cacheNode) cacheRecords(lease string, event audit.Event) []audit.Record {
	var out []audit.Record
	for _, r := range n.sink.files() {
		if r.Lease == lease && r.Event == event {
			out = append(out, r)
		}
	}
	return out
}

// TestCaches: a tenant cache is kept per tenant and template, restored at a lease's start
// unless it asks for no caches, and written back at its end only when it asked for that when it
// began, up to its cap; never at a pause. Each subtest has tenants of its own.
func TestCaches(t *testing.T) {
	n := newCacheNode(t)
	ctx := context.Background()

	t.Run("a lease that writes back seeds the next lease of the tenant and template, with the hashes recorded", func(t *testing.T) {
		a := n.seed(t, "acme", "python", "wheel v1")
		writes := n.cacheRecords(a.ID, pool.EventCacheWrite)
		if len(writes) != 1 || writes[0].Decision != audit.Allow || !strings.HasPrefix(writes[0].SHA256, "sha256:") || writes[0].Path != "/workspace/.cache/pip" ||
			!strings.Contains(writes[0].Reason, "(the first kept)") {
			t.Fatalf("the write-back's records: %+v", writes)
		}
		m, err := n.e.Manager.SnapshotInfo(ctx, "acme", "cache:python.pip")
		if err != nil || m.ID != writes[0].SHA256 || m.Kind != snapshot.KindCache || m.Lease != a.ID || writes[0].Size != m.Size {
			t.Fatalf("the tenant's cache is %+v, %v; the record says %s of %d bytes", m, err, writes[0].SHA256, writes[0].Size)
		}

		b := n.lease(t, "acme", "python", pool.LeaseRequest{})
		defer n.release(t, b)
		if got := n.ws.Get(b.Sandbox.ID, pipFile); got != "wheel v1" {
			t.Fatalf("the next lease's pip cache holds %q, want what the first left", got)
		}
		reads := n.cacheRecords(b.ID, pool.EventCacheRead)
		var tenantRead, seededRead *audit.Record
		for i, r := range reads {
			switch r.Path {
			case "/workspace/.cache/pip":
				tenantRead = &reads[i]
			case "/opt/wheels":
				seededRead = &reads[i]
			}
		}
		if tenantRead == nil || tenantRead.SHA256 != m.ID || tenantRead.Decision != audit.Allow || !strings.Contains(tenantRead.Reason, a.ID) {
			t.Errorf("the read of the tenant cache is recorded as %+v, want its ID %s and the lease that wrote it", tenantRead, m.ID)
		}
		if seededRead == nil || seededRead.SHA256 != b.Sandbox.Image || b.Sandbox.Image == "" {
			t.Errorf("the seeded cache's read is recorded as %+v, want the image %q", seededRead, b.Sandbox.Image)
		}
	})

	t.Run("another tenant's lease starts with nothing", func(t *testing.T) {
		n.seed(t, "initech", "python", "initech's wheel")
		other := n.lease(t, "umbrella", "python", pool.LeaseRequest{})
		defer n.release(t, other)
		if got := n.ws.Get(other.Sandbox.ID, pipFile); got != "" {
			t.Fatalf("another tenant's lease found %q in its pip cache", got)
		}
		for _, r := range n.cacheRecords(other.ID, pool.EventCacheRead) {
			if r.Path == "/workspace/.cache/pip" {
				t.Errorf("another tenant's lease recorded a read of a pip cache: %+v", r)
			}
		}
		if _, err := n.e.Manager.SnapshotInfo(ctx, "umbrella", "cache:python.pip"); !errors.Is(err, pool.ErrNoSuchSnapshot) {
			t.Errorf("the other tenant holds a pip cache: %v", err)
		}
	})

	t.Run("another template's lease starts with nothing", func(t *testing.T) {
		n.seed(t, "hooli", "python", "python's wheel")
		l := n.lease(t, "hooli", "node", pool.LeaseRequest{})
		defer n.release(t, l)
		if got := n.ws.Get(l.Sandbox.ID, pipFile); got != "" {
			t.Fatalf("a lease of template node found %q, which a lease of python left", got)
		}
	})

	t.Run("a tenant deletes a cache it fears poisoned, and the next lease starts without it", func(t *testing.T) {
		n.seed(t, "initrode", "python", "a wheel it no longer trusts")
		if err := n.e.Manager.DeleteSnapshot(ctx, "initrode", "cache:python.pip"); err != nil {
			t.Fatalf("deleting the cache: %v", err)
		}
		l := n.lease(t, "initrode", "python", pool.LeaseRequest{})
		defer n.release(t, l)
		if got := n.ws.Get(l.Sandbox.ID, pipFile); got != "" {
			t.Fatalf("a lease after the cache was deleted found %q", got)
		}
	})

	t.Run("no_caches starts with them empty", func(t *testing.T) {
		n.seed(t, "piedpiper", "python", "a wheel")
		l := n.lease(t, "piedpiper", "python", pool.LeaseRequest{NoCaches: true})
		defer n.release(t, l)
		if got := n.ws.Get(l.Sandbox.ID, pipFile); got != "" {
			t.Fatalf("a lease with no_caches found %q in its pip cache", got)
		}
		for _, r := range n.cacheRecords(l.ID, pool.EventCacheRead) {
			if r.Path == "/workspace/.cache/pip" {
				t.Errorf("a lease with no_caches recorded a read of its pip cache: %+v", r)
			}
		}
	})

	t.Run("a lease that did not ask does not write back", func(t *testing.T) {
		n.seed(t, "vandelay", "python", "the good wheel")
		b := n.lease(t, "vandelay", "python", pool.LeaseRequest{})
		n.ws.Put(b.Sandbox.ID, pipFile, "a poisoned wheel")
		n.release(t, b)
		if w := n.cacheRecords(b.ID, pool.EventCacheWrite); len(w) != 0 {
			t.Errorf("a lease that did not ask wrote back: %+v", w)
		}
		c := n.lease(t, "vandelay", "python", pool.LeaseRequest{})
		defer n.release(t, c)
		if got := n.ws.Get(c.Sandbox.ID, pipFile); got != "the good wheel" {
			t.Fatalf("the next lease found %q, want what the last lease that asked to write back left", got)
		}
	})

	t.Run("over max_mb it is not written back, the numbers recorded, and the lease still ends", func(t *testing.T) {
		n.seed(t, "wonka", "python", "a small wheel")
		before, _ := n.e.Manager.SnapshotInfo(ctx, "wonka", "cache:python.pip")
		b := n.lease(t, "wonka", "python", pool.LeaseRequest{WriteCaches: true})
		n.ws.Put(b.Sandbox.ID, pipFile, strings.Repeat("x", 1<<20+1))
		n.release(t, b) // fails the test if the release fails
		if !n.e.Runtime.Destroyed(b.Sandbox.ID) {
			t.Errorf("the lease's sandbox was not destroyed")
		}
		w := n.cacheRecords(b.ID, pool.EventCacheWrite)
		if len(w) != 1 || w[0].Decision != audit.Deny || !strings.Contains(w[0].Reason, "more than its max_mb of 1 MiB") || !strings.Contains(w[0].Reason, "declares 1048577 bytes") {
			t.Fatalf("the refused write-back's records: %+v", w)
		}
		after, err := n.e.Manager.SnapshotInfo(ctx, "wonka", "cache:python.pip")
		if err != nil || after.ID != before.ID {
			t.Fatalf("the tenant's cache changed from %s to %s (%v)", before.ID, after.ID, err)
		}
	})

	t.Run("a pause does not write back", func(t *testing.T) {
		a := n.lease(t, "soylent", "python", pool.LeaseRequest{WriteCaches: true})
		n.ws.Put(a.Sandbox.ID, pipFile, "left before a pause")
		if _, err := n.e.Manager.Pause(ctx, "soylent", a.ID, false); err != nil {
			t.Fatal(err)
		}
		if w := n.cacheRecords(a.ID, pool.EventCacheWrite); len(w) != 0 {
			t.Errorf("the pause wrote the cache back: %+v", w)
		}
		if _, err := n.e.Manager.SnapshotInfo(ctx, "soylent", "cache:python.pip"); !errors.Is(err, pool.ErrNoSuchSnapshot) {
			t.Errorf("the tenant holds a pip cache after a pause: %v", err)
		}
		if err := n.e.Manager.ReleasePaused(ctx, "soylent", a.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("write_caches on a template that keeps none is refused before a sandbox is claimed", func(t *testing.T) {
		_, err := n.e.Manager.Lease(ctx, n.request(t, "acme", "plain", pool.LeaseRequest{WriteCaches: true}))
		if !errors.Is(err, pool.ErrBadRequest) || !strings.Contains(err.Error(), "declares no cache kept per tenant") {
			t.Fatalf("lease = %v", err)
		}
	})

	t.Run("a cache that fails to restore refuses the lease and its sandbox is destroyed", func(t *testing.T) {
		n.seed(t, "cyberdyne", "python", "a wheel")
		close(n.failRestore) // the last subtest: every restore fails from here
		_, err := n.e.Manager.Lease(ctx, n.request(t, "cyberdyne", "python", pool.LeaseRequest{}))
		if err == nil || !strings.Contains(err.Error(), "restoring cache pip") || !strings.Contains(err.Error(), "no_caches") {
			t.Fatalf("lease = %v", err)
		}
		var denied []audit.Record
		for _, r := range n.sink.files() {
			if r.Tenant == "cyberdyne" && r.Event == pool.EventCacheRead && r.Decision == audit.Deny {
				denied = append(denied, r)
			}
		}
		if len(denied) != 1 || !n.e.Runtime.Destroyed(denied[0].Sandbox) {
			t.Fatalf("the refused restore's records %+v, its sandbox destroyed: %v", denied, len(denied) == 1 && n.e.Runtime.Destroyed(denied[0].Sandbox))
		}
		// Without the cache, it leases.
		l := n.lease(t, "cyberdyne", "python", pool.LeaseRequest{NoCaches: true})
		n.release(t, l)
	})
}

// TestCachesWithoutStore: a node that keeps no snapshots keeps no caches: a lease asking to
// write them back is refused saying so, one that does not starts with them empty.
func TestCachesWithoutStore(t *testing.T) {
	sink := &recordSink{}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{Name: "python", MinWarm: 1, MaxTotal: 4,
		Caches: []pool.Cache{{Name: "pip", Path: "~/.cache/pip", MaxMB: 1}}}}, Pool: func(c *pool.Config) { c.Audit = sink }})
	e.MustWarm(t, 1)
	ctx := context.Background()
	mint := func() string {
		tok, err := e.Issuer.Mint(fmt.Sprintf("task-%d", time.Now().UnixNano()), "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if _, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "python", Token: mint(), WriteCaches: true}); !errors.Is(err, pool.ErrNoSnapshots) {
		t.Fatalf("write_caches on a node with no store: %v", err)
	}
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "python", Token: mint()})
	if err != nil {
		t.Fatal(err)
	}
	var bind audit.Record
	for _, r := range sink.kind(audit.KindLease) {
		if r.Lease == l.ID && r.Event == audit.EventBind {
			bind = r
		}
	}
	if !strings.Contains(bind.Reason, "cache pip empty (this node keeps no caches)") {
		t.Errorf("the bind record says %q", bind.Reason)
	}
}

// TestCacheValidation: a template's caches are checked beside it, each error naming the field.
func TestCacheValidation(t *testing.T) {
	tests := []struct {
		name   string
		caches []pool.Cache
		want   string // "" for valid
	}{
		{"a tenant cache under the workdir", []pool.Cache{{Name: "pip", Path: "~/.cache/pip", MaxMB: 8}}, ""},
		{"a tenant cache under /tmp", []pool.Cache{{Name: "go-build", Path: "/tmp/go-build", MaxMB: 8, Mode: pool.CacheTenant}}, ""},
		{"a seeded cache in the image", []pool.Cache{{Name: "wheels", Path: "/opt/wheels", Mode: pool.CacheSeeded}}, ""},
		{"a name with a dot", []pool.Cache{{Name: "pip.x", Path: "~/.cache/pip", MaxMB: 8}}, "caches[0].name"},
		{"an upper-case name", []pool.Cache{{Name: "Pip", Path: "~/.cache/pip", MaxMB: 8}}, "caches[0].name"},
		{"a name twice", []pool.Cache{{Name: "pip", Path: "~/a", MaxMB: 8}, {Name: "pip", Path: "~/b", MaxMB: 8}}, `caches[1].name: "pip" is declared twice`},
		{"a relative path", []pool.Cache{{Name: "pip", Path: ".cache/pip", MaxMB: 8}}, "caches[0].path"},
		{"a path that climbs", []pool.Cache{{Name: "pip", Path: "~/../etc", MaxMB: 8}}, "caches[0].path"},
		{"another user's home", []pool.Cache{{Name: "pip", Path: "~root/.cache", MaxMB: 8}}, "caches[0].path"},
		{"the whole workdir", []pool.Cache{{Name: "all", Path: "/workspace", MaxMB: 8}}, "caches[0].path: \"/workspace\" is a whole tmpfs"},
		{"the whole of /tmp", []pool.Cache{{Name: "all", Path: "/tmp", MaxMB: 8}}, "caches[0].path: \"/tmp\" is a whole tmpfs"},
		{"a tenant cache no lease can write", []pool.Cache{{Name: "pip", Path: "/var/cache/pip", MaxMB: 8}}, "the sandbox's only writable places"},
		{"a seeded cache a tmpfs hides", []pool.Cache{{Name: "pip", Path: "~/.cache/pip", Mode: pool.CacheSeeded}}, "whose tmpfs mounts hide what the image holds"},
		{"a seeded cache over the workdir", []pool.Cache{{Name: "root", Path: "/", Mode: pool.CacheSeeded}}, "caches[0].path"},
		{"a seeded cache with a cap", []pool.Cache{{Name: "wheels", Path: "/opt/wheels", Mode: pool.CacheSeeded, MaxMB: 8}}, "caches[0].max_mb: a seeded cache is the image's"},
		{"no cap", []pool.Cache{{Name: "pip", Path: "~/.cache/pip"}}, "caches[0].max_mb: must be > 0"},
		{"a cap over the tmpfs", []pool.Cache{{Name: "pip", Path: "~/.cache/pip", MaxMB: 17}}, "caches[0].max_mb: 17 is more than workspace_mb (16)"},
		{"a cap over /tmp", []pool.Cache{{Name: "t", Path: "/tmp/t", MaxMB: 17}}, "caches[0].max_mb: 17 is more than tmp_mb (16)"},
		{"an unknown mode", []pool.Cache{{Name: "pip", Path: "~/.cache/pip", MaxMB: 8, Mode: "shared"}}, `caches[0].mode: "shared" is not tenant or seeded`},
		{"nested paths", []pool.Cache{{Name: "a", Path: "~/.cache", MaxMB: 8}, {Name: "b", Path: "~/.cache/pip", MaxMB: 8}}, "caches[1].path: \"~/.cache/pip\" overlaps another cache's path /workspace/.cache"},
		{"too many", make([]pool.Cache, 9), "caches: 9 declared, at most 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := pooltest.Template(pool.Template{Name: "python", Caches: tt.caches})
			errs := errors.Join(tmpl.Validate()...)
			switch {
			case tt.want == "" && errs != nil:
				t.Fatalf("Validate = %v, want none", errs)
			case tt.want != "" && (errs == nil || !strings.Contains(errs.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error naming %q", errs, tt.want)
			}
		})
	}
}

// TestCacheReadAfterItsCapIsLowered: max_mb bounds what a lease writes back; a cache kept
// before it was lowered still reads (rather than being taken for one altered in the store),
// and the next write-back over the new cap is refused.
func TestCacheReadAfterItsCapIsLowered(t *testing.T) {
	catalog := pooltest.Catalog(t, "../bin/vault")
	ctx := context.Background()
	node := func(maxMB int64) (*pooltest.Env, *pooltest.Workspaces, *recordSink) {
		ws, sink := pooltest.NewWorkspaces(), &recordSink{}
		e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{Name: "python", MinWarm: 1, MaxTotal: 4,
			Caches: []pool.Cache{{Name: "pip", Path: "~/.cache/pip", MaxMB: maxMB}}}},
			Runtime: func(rt *pooltest.Runtime) { rt.ExecFunc = ws.Exec },
			Pool:    func(c *pool.Config) { c.Snapshots, c.Audit = catalog, sink }})
		e.MustWarm(t, 1)
		return e, ws, sink
	}
	lease := func(e *pooltest.Env, write bool) pool.Lease {
		t.Helper()
		tok, _ := e.Issuer.Mint(fmt.Sprintf("task-%d", time.Now().UnixNano()), "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
		l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "python", Token: tok, WriteCaches: write})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	big := strings.Repeat("w", 3<<19) // 1.5 MiB

	before, ws, _ := node(2)
	a := lease(before, true)
	ws.Put(a.Sandbox.ID, pipFile, big)
	if err := before.Manager.Release(ctx, "acme", a.ID); err != nil {
		t.Fatal(err)
	}
	if err := before.Manager.AwaitEnd(ctx, "acme", a.ID); err != nil {
		t.Fatal(err)
	}
	before.Close()

	after, ws, sink := node(1)
	b := lease(after, true)
	if got := ws.Get(b.Sandbox.ID, pipFile); got != big {
		t.Fatalf("the cache kept under max_mb 2 read %d bytes under max_mb 1, want %d", len(got), len(big))
	}
	if err := after.Manager.Release(ctx, "acme", b.ID); err != nil {
		t.Fatal(err)
	}
	if err := after.Manager.AwaitEnd(ctx, "acme", b.ID); err != nil {
		t.Fatal(err)
	}
	var writes []audit.Record
	for _, r := range sink.files() {
		if r.Lease == b.ID && r.Event == pool.EventCacheWrite {
			writes = append(writes, r)
		}
	}
	if len(writes) != 1 || writes[0].Decision != audit.Deny || !strings.Contains(writes[0].Reason, "more than its max_mb of 1 MiB") {
		t.Fatalf("writing back 1.5 MiB under max_mb 1: %+v", writes)
	}
}
