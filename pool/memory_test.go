package pool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/snapshot"
)

// ckptRuntime is a pooltest.Runtime that checkpoints: a checkpoint holds the sandbox's notes
// (pooltest.Workspaces) and "memory" (a process it says runs), and a restore puts them back
// into the sandbox it is given, at another address.
type ckptRuntime struct {
	*pooltest.Runtime
	ws *pooltest.Workspaces

	mu          sync.Mutex
	fail        error  // what Checkpoint fails with
	extra       string // a file name a checkpoint holds besides its own
	failRestore error
	keepAddr    bool // a restore keeps the sandbox's address
	// bound, when set, is asked at each checkpoint whether the sandbox's address is bound.
	bound        func(netip.Addr) bool
	boundAtCut   []bool
	checkpointed []string
	restored     []string // the sandboxes restored into
}

var _ pool.Checkpointer = (*ckptRuntime)(nil)

// restoredAddr is where a restored sandbox comes back.
var restoredAddr = netip.MustParseAddr("10.99.0.99")

func (c *ckptRuntime) CanCheckpoint(context.Context, pool.Template) (bool, string) { return true, "" }

func (c *ckptRuntime) Checkpoint(_ context.Context, sb pool.Sandbox, dir string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	c.checkpointed = append(c.checkpointed, sb.ID)
	if c.bound != nil {
		c.boundAtCut = append(c.boundAtCut, c.bound(sb.Addr))
	}
	files := map[string]string{"checkpoint.img": c.ws.Get(sb.ID, "workspace/notes.txt"), "pages.img": "process 42 running"}
	if c.extra != "" {
		files[c.extra] = "x"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (c *ckptRuntime) Restore(_ context.Context, sb pool.Sandbox, dir string) (pool.Sandbox, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failRestore != nil {
		return sb, c.failRestore
	}
	notes, err := os.ReadFile(filepath.Join(dir, "checkpoint.img"))
	if err != nil {
		return sb, err
	}
	mem, err := os.ReadFile(filepath.Join(dir, "pages.img"))
	if err != nil {
		return sb, err
	}
	c.ws.Put(sb.ID, "workspace/notes.txt", string(notes))
	c.ws.Put(sb.ID, "memory", string(mem))
	c.restored = append(c.restored, sb.ID)
	if !c.keepAddr {
		sb.Addr = restoredAddr
	}
	return sb, nil
}

// memoryNode is a pauseNode whose runtime checkpoints and whose template keeps memory.
func memoryNode(t *testing.T, memory bool, runtime ...func(*pooltest.Runtime)) (*pauseNode, *ckptRuntime) {
	t.Helper()
	n := &pauseNode{ws: pooltest.NewWorkspaces(), store: t.TempDir(), scratch: t.TempDir()}
	catalog := pooltest.CatalogAt(t, "../bin/vault", n.store)
	ck := &ckptRuntime{ws: n.ws}
	n.e = pooltest.NewEnv(t, pooltest.EnvConfig{
		Templates: []pool.Template{{MinWarm: 2, MaxTotal: 10, Runtime: "runsc", Snapshot: pool.SnapshotPolicy{MaxPaused: time.Hour, Memory: memory}}},
		Runtime: func(rt *pooltest.Runtime) {
			rt.ExecFunc = n.ws.Exec
			for _, f := range runtime {
				f(rt)
			}
		},
		Pool: func(c *pool.Config) {
			ck.Runtime = c.Runtime.(*pooltest.Runtime)
			c.Runtime = ck
			c.Snapshots = catalog
			c.Scratch = n.scratch
			c.Revoke = func(context.Context, string) error { n.revoked.Add(1); return nil }
			c.Release = func(context.Context, string) error { n.released.Add(1); return nil }
		}})
	n.e.MustWarm(t, 2)
	ck.bound = func(a netip.Addr) bool {
		_, err := n.e.Cache.Lookup(context.Background(), a)
		return err == nil
	}
	return n, ck
}

// A pause that asks for memory on a template that keeps it stores a checkpoint (and no archive
// of files), says it kept memory+files, and ends the sandbox as a pause does; the resume
// restores the checkpoint into a warm sandbox, says so, and binds the lease at the address the
// restored sandbox has; the checkpoint's files leave nothing in the scratch folder.
func TestPauseKeepsMemory(t *testing.T) {
	n, ck := memoryNode(t, true)
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t)
	n.ws.Put(l.Sandbox.ID, "workspace/notes.txt", "in memory")
	p, err := m.PauseWith(ctx, "acme", l.ID, pool.PauseOptions{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Kept != apitype.KeptMemory || p.Why != "" {
		t.Fatalf("the pause: %+v; want memory+files kept, no why", p)
	}
	if len(ck.checkpointed) != 1 || ck.checkpointed[0] != l.Sandbox.ID || !n.e.Runtime.Destroyed(l.Sandbox.ID) || n.revoked.Load() != 1 {
		t.Fatalf("checkpointed %v, destroyed %v, revoked %d", ck.checkpointed, n.e.Runtime.Destroyed(l.Sandbox.ID), n.revoked.Load())
	}
	// Stopping the sandbox gives its address back to the engine: the lease was unbound first.
	if len(ck.boundAtCut) != 1 || ck.boundAtCut[0] {
		t.Fatalf("the sandbox's address was still bound when it was checkpointed (%v)", ck.boundAtCut)
	}
	info, err := m.PausedLease(ctx, "acme", l.ID)
	if err != nil || info.Kept != apitype.KeptMemory {
		t.Fatalf("the paused lease: %+v, %v", info, err)
	}
	r, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Restored == nil || r.Restored.Kept != apitype.KeptMemory || r.Restored.Files != 2 {
		t.Fatalf("the resume's restore: %+v", r.Restored)
	}
	if len(ck.restored) != 1 || ck.restored[0] != r.Sandbox.ID || r.Sandbox.ID == l.Sandbox.ID {
		t.Fatalf("restored into %v; the resumed lease runs in %s, the paused one ran in %s", ck.restored, r.Sandbox.ID, l.Sandbox.ID)
	}
	if got := n.ws.Get(r.Sandbox.ID, "memory"); got != "process 42 running" || n.ws.Get(r.Sandbox.ID, "workspace/notes.txt") != "in memory" {
		t.Fatalf("the resumed sandbox's memory %q and notes %q", got, n.ws.Get(r.Sandbox.ID, "workspace/notes.txt"))
	}
	got, err := m.Get(ctx, "acme", l.ID)
	if err != nil || got.Sandbox.Addr != restoredAddr {
		t.Fatalf("the resumed lease is bound at %v (%v); its restored sandbox is at %s", got.Sandbox.Addr, err, restoredAddr)
	}
	if left, _ := os.ReadDir(n.scratch); len(left) != 0 {
		t.Fatalf("the scratch folder still holds %d entries after the pause and the resume", len(left))
	}
}

// Where memory cannot be kept, the pause keeps the files and says why, naming what stops it:
// a template without snapshot.memory, a pause that asks to be kept as a snapshot, a checkpoint
// that fails (the sandbox runs on as it was, then paused by its files).
func TestPauseKeepsFilesWhereMemoryCannotBe(t *testing.T) {
	cases := []struct {
		name   string
		memory bool
		keep   bool
		fail   error
		want   string
	}{
		{"template without snapshot.memory", false, false, nil, "snapshot.memory"},
		{"a pause kept as a snapshot", true, true, nil, "snapshot holds files"},
		{"a checkpoint that fails", true, false, errors.New("runsc: no space left"), "the checkpoint failed, so the pause keeps the files: runsc: no space left"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, ck := memoryNode(t, c.memory)
			ck.fail = c.fail
			ctx := context.Background()
			m := n.e.Manager
			l := n.lease(t)
			n.ws.Put(l.Sandbox.ID, "workspace/notes.txt", "on disk")
			p, err := m.PauseWith(ctx, "acme", l.ID, pool.PauseOptions{Memory: true, Keep: c.keep})
			if err != nil {
				t.Fatal(err)
			}
			if p.Kept != apitype.KeptFiles || !strings.Contains(p.Why, c.want) {
				t.Fatalf("the pause: kept %s, why %q; want files, and why saying %q", p.Kept, p.Why, c.want)
			}
			r, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")})
			if err != nil {
				t.Fatal(err)
			}
			if len(ck.restored) != 0 || r.Restored.Kept != apitype.KeptFiles || n.ws.Get(r.Sandbox.ID, "workspace/notes.txt") != "on disk" {
				t.Fatalf("the resume: restored checkpoints into %v, kept %s, notes %q", ck.restored, r.Restored.Kept, n.ws.Get(r.Sandbox.ID, "workspace/notes.txt"))
			}
		})
	}
}

// A checkpoint that cannot be kept (here: it holds a file no checkpoint is made of) fails the
// pause and the sandbox is restored where it was: the lease runs on, bound as before, when the
// sandbox comes back at its address; when it comes back elsewhere, the lease is released (its
// binding would name an address it no longer has). Either way nothing is left paused.
func TestPauseWhoseCheckpointIsNotKept(t *testing.T) {
	for _, c := range []struct {
		name             string
		keepAddr, runsOn bool
		failRestore      error
		want             string
	}{
		{"back at its address", true, true, nil, "the lease runs on, not paused"},
		{"back elsewhere", false, false, nil, "came back at 10.99.0.99"},
		{"not back", true, false, errors.New("runsc: restore failed"), "could not be restored from the checkpoint (runsc: restore failed)"},
	} {
		keepAddr := c.runsOn
		t.Run(c.name, func(t *testing.T) {
			n, ck := memoryNode(t, true)
			ck.extra, ck.keepAddr, ck.failRestore = "not a checkpoint's file", c.keepAddr, c.failRestore
			ctx := context.Background()
			m := n.e.Manager
			l := n.lease(t)
			_, err := m.PauseWith(ctx, "acme", l.ID, pool.PauseOptions{Memory: true})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "not a file a checkpoint is made of") {
				t.Fatalf("a pause whose checkpoint cannot be kept: %v; want it to say %q", err, c.want)
			}
			if !keepAddr && !strings.Contains(err.Error(), "the pause failed and the lease is released") {
				t.Fatalf("a pause that could not leave the lease running: %v; want it to say the lease is released", err)
			}
			if c.failRestore == nil && (len(ck.restored) != 1 || ck.restored[0] != l.Sandbox.ID) {
				t.Fatalf("the sandbox was restored into %v; want its own %s", ck.restored, l.Sandbox.ID)
			}
			_, err = m.Get(ctx, "acme", l.ID)
			if keepAddr && err != nil {
				t.Fatalf("the lease whose sandbox came back at its address: %v; want it running", err)
			}
			if !keepAddr && !errors.Is(err, pool.ErrLeaseNotFound) {
				t.Fatalf("the lease whose sandbox came back elsewhere: %v; want it released", err)
			}
			if all, _ := m.PausedLeases(ctx, "acme"); len(all) != 0 {
				t.Fatalf("paused leases after the failed pause: %+v", all)
			}
			if left, _ := os.ReadDir(n.scratch); len(left) != 0 {
				t.Fatalf("the scratch folder still holds %d entries", len(left))
			}
		})
	}
}

// The form of a pause is not taken from its manifest's word (which is not signed): a pause of
// files whose manifest is edited to say it is a checkpoint is refused at its resume, the archive
// never reaching the runtime as a checkpoint, and the refusal is recorded.
func TestPauseFormIsNotTakenFromTheManifest(t *testing.T) {
	n, ck := memoryNode(t, true)
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t)
	// A workspace that holds what a checkpoint would.
	n.ws.Put(l.Sandbox.ID, "workspace/checkpoint.img", "crafted")
	n.ws.Put(l.Sandbox.ID, "workspace/pages.img", "crafted")
	if _, err := m.PauseWith(ctx, "acme", l.ID, pool.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	manifests, _ := filepath.Glob(filepath.Join(n.store, "tenants", "acme", "manifests", "*.json"))
	edited := 0
	for _, f := range manifests {
		b, _ := os.ReadFile(f)
		if !bytes.Contains(b, []byte(l.ID)) {
			continue
		}
		b = bytes.Replace(b, []byte(`"kept": "files"`), []byte(`"form": "checkpoint", "kept": "memory+files"`), 1)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		edited++
	}
	if edited != 1 || !strings.Contains(mustRead(manifests), `"form": "checkpoint"`) {
		t.Fatalf("edited %d manifests of lease %s among %v", edited, l.ID, manifests)
	}
	_, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")})
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "not a file a checkpoint is made of") {
		t.Fatalf("resuming a files pause whose manifest says checkpoint: %v", err)
	}
	if len(ck.restored) != 0 {
		t.Fatalf("the archive of files reached the runtime as a checkpoint: restored into %v", ck.restored)
	}
}

// mustRead is what files hold, one after the other.
func mustRead(files []string) string {
	var out strings.Builder
	for _, f := range files {
		b, _ := os.ReadFile(f)
		out.Write(b)
	}
	return out.String()
}

// snapshot.memory is refused on a template gVisor does not run: only its checkpoint keeps a
// sandbox's memory.
func TestMemoryNeedsGVisor(t *testing.T) {
	for rt, want := range map[string]string{"": "snapshot.memory: only gVisor", "runc": "snapshot.memory: only gVisor", "runsc": ""} {
		tmpl := pooltest.Template(pool.Template{Name: "m", Runtime: rt, Snapshot: pool.SnapshotPolicy{Memory: true}})
		errs := errors.Join(tmpl.Validate()...)
		if want == "" && errs != nil || want != "" && (errs == nil || !strings.Contains(errs.Error(), want)) {
			t.Errorf("runtime %q with snapshot.memory: Validate = %v, want %q", rt, errs, want)
		}
	}
}

// A checkpoint is never restored into a sandbox whose address another lease is still bound to:
// what it ran would run there, before its own lease is bound, as that lease. (Every sandbox of
// this runtime has one address, as a sandbox made where a stopped one's address was given back
// would.)
func TestCheckpointNotRestoredAtABoundAddress(t *testing.T) {
	n, ck := memoryNode(t, true, func(rt *pooltest.Runtime) { rt.Addr = netip.MustParseAddr("10.0.0.7") })
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t)
	if p, err := m.PauseWith(ctx, "acme", l.ID, pool.PauseOptions{Memory: true}); err != nil || p.Kept != apitype.KeptMemory {
		t.Fatalf("the pause: %+v %v", p, err)
	}
	other, err := m.Lease(ctx, pool.LeaseRequest{Tenant: "globex", Template: "default", Token: n.token(t, "task-9", "globex")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")})
	if err == nil || !strings.Contains(err.Error(), "is bound to lease "+other.ID) {
		t.Fatalf("a resume into a sandbox at an address lease %s is bound to: %v", other.ID, err)
	}
	if len(ck.restored) != 0 {
		t.Fatalf("the checkpoint was restored into %v", ck.restored)
	}
	if all, _ := m.PausedLeases(ctx, "acme"); len(all) != 1 {
		t.Fatalf("after the refused resume the lease is not paused still: %+v", all)
	}
}

// A background process running at a pause that keeps memory is carried across it: its entry
// says why it stopped being followed, the resumed lease lists it again under its id (resumed,
// running, signalled by its marker), and once it is gone from the sandbox its entry ends.
func TestPauseCarriesProcesses(t *testing.T) {
	var mu sync.Mutex
	alive := map[string]bool{}
	var signalled []string
	n, _ := memoryNode(t, true, func(rt *pooltest.Runtime) {
		ws := rt.ExecFunc
		rt.ExecFunc = func(ctx context.Context, sb pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
			switch {
			case len(req.Cmd) > 3 && req.Cmd[3] == "alive":
				mu.Lock()
				for _, m := range req.Cmd[4:] {
					if alive[m] {
						fmt.Fprintln(stdout, m)
					}
				}
				mu.Unlock()
				return 0, nil
			case req.Cmd[0] == "forever":
				mu.Lock()
				alive[req.Marker] = true
				mu.Unlock()
				<-ctx.Done()
				return -1, errors.New("the sandbox's exec agent stopped")
			}
			return ws(ctx, sb, req, stdin, stdout, stderr)
		}
		rt.SignalFunc = func(_ context.Context, _ pool.Sandbox, marker, sig string) error {
			mu.Lock()
			defer mu.Unlock()
			signalled = append(signalled, marker+" "+sig)
			return nil
		}
	})
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t)
	p, err := m.StartProcess(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"forever", "--and", "ever"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.PauseWith(ctx, "acme", l.ID, pool.PauseOptions{Memory: true}); err != nil {
		t.Fatal(err)
	}
	// The pause's end of the old entry signals its marker in the paused sandbox, which a real
	// runtime has stopped by then (it takes no signal): only what follows the resume counts.
	mu.Lock()
	signalled = nil
	mu.Unlock()
	if _, err := m.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: n.token(t, "task-1", "acme")}); err != nil {
		t.Fatal(err)
	}
	ps, err := m.Processes(ctx, "acme", l.ID)
	if err != nil || len(ps) != 1 || ps[0].ID != p.ID || !ps[0].Running || !ps[0].Resumed || strings.Join(ps[0].Cmd, " ") != "forever --and ever" {
		t.Fatalf("the resumed lease's processes: %+v %v; want %s listed again, running, resumed", ps, err, p.ID)
	}
	if err := m.SignalProcess(ctx, "acme", l.ID, p.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	var marker string
	for mk := range alive {
		marker = mk
	}
	got := strings.Join(signalled, ",")
	mu.Unlock()
	if got != marker+" TERM" {
		t.Fatalf("signalled %q; want the process's marker %s with TERM", got, marker)
	}
	mu.Lock()
	alive[marker] = false
	mu.Unlock()
	w, err := m.WaitProcess(ctx, "acme", l.ID, p.ID, 10*time.Second)
	if err != nil || w.Running || !strings.Contains(w.Error, "ended after the lease's resume") {
		t.Fatalf("the carried process, gone from the sandbox: %+v %v", w, err)
	}
}
