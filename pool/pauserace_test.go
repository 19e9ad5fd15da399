package pool_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// racingNode is a pool whose sandboxes' files are pooltest.Workspaces, keeping its state in a
// catalog over a real Vault, whose archive of a sandbox (a snapshot's or a pause's) can be held
// part way, as a slow tar would be, while the test acts on the lease.
type racingNode struct {
	e  *pooltest.Env
	ws *pooltest.Workspaces
	// hold, when set, is told when the next archive begins, and holds it until its go_ is
	// closed.
	hold     atomic.Pointer[archiveHold]
	released atomic.Int32
	// revokes are the leases Revoke was called for, each with whether it was bound then.
	revokes chan revokeCall
	// onRecord, when set, sees each audit record as it is written.
	onRecord atomic.Pointer[func(audit.Record)]
}

// hookSink hands each record to the node's onRecord.
type hookSink struct{ n *racingNode }

func (s hookSink) Write(_ context.Context, r audit.Record) error {
	if f := s.n.onRecord.Load(); f != nil {
		(*f)(r)
	}
	return nil
}

type revokeCall struct {
	lease string
	bound bool
}

type archiveHold struct {
	cmd   string // "snapshot" (an archive) or "restore"
	begun chan struct{}
	go_   chan struct{}
}

func newRacingNode(t *testing.T) *racingNode {
	t.Helper()
	n := &racingNode{ws: pooltest.NewWorkspaces(), revokes: make(chan revokeCall, 16)}
	catalog := pooltest.Catalog(t, "../bin/vault")
	n.e = pooltest.NewEnv(t, pooltest.EnvConfig{
		Templates: []pool.Template{{MinWarm: 2, MaxTotal: 10, Snapshot: pool.SnapshotPolicy{MaxPaused: time.Hour}}},
		Runtime: func(rt *pooltest.Runtime) {
			rt.ExecFunc = func(ctx context.Context, sb pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
				if h := n.hold.Load(); h != nil && len(req.Cmd) > 3 && req.Cmd[3] == h.cmd && n.hold.CompareAndSwap(h, nil) {
					close(h.begun)
					select {
					case <-h.go_:
					case <-ctx.Done():
						return -1, ctx.Err()
					}
				}
				return n.ws.Exec(ctx, sb, req, stdin, stdout, stderr)
			}
		},
		Pool: func(c *pool.Config) {
			c.Snapshots = catalog
			c.Audit = hookSink{n}
			c.Release = func(context.Context, string) error { n.released.Add(1); return nil }
			c.Revoke = func(ctx context.Context, lease string) error {
				_, err := n.e.Store.GetLease(ctx, lease)
				n.revokes <- revokeCall{lease: lease, bound: err == nil}
				return nil
			}
		}})
	n.e.MustWarm(t, 2)
	return n
}

// holdArchives holds the next archive until the returned function is called.
func (n *racingNode) holdArchives() (begun <-chan struct{}, proceed func()) {
	return n.holdNext("snapshot")
}

// holdNext holds the next run of the pool's script cmd ("snapshot", "restore") until the
// returned function is called.
func (n *racingNode) holdNext(cmd string) (begun <-chan struct{}, proceed func()) {
	h := &archiveHold{cmd: cmd, begun: make(chan struct{}), go_: make(chan struct{})}
	n.hold.Store(h)
	return h.begun, func() { close(h.go_) }
}

func (n *racingNode) lease(t *testing.T, task string) pool.Lease {
	t.Helper()
	tok, err := n.e.Issuer.Mint(task, "acme", []scope.Scope{{Host: "a.example"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.e.Manager.Lease(context.Background(), pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	n.ws.Put(l.Sandbox.ID, "workspace/notes.txt", "the tenant asked for this to be gone")
	return l
}

func (n *racingNode) resume(t *testing.T, l pool.Lease) error {
	t.Helper()
	tok, err := n.e.Issuer.Mint(l.Task, "acme", []scope.Scope{{Host: "a.example"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.e.Manager.Resume(context.Background(), pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: tok})
	return err
}

// A release that lands while a pause is archiving the lease wins: the lease ends as released,
// and the pause, which finds it gone when it comes to end the sandbox, fails and keeps nothing.
// Before, the pause kept its archive as a paused lease: the released lease was listed as
// paused, its files kept for max_paused against the release, and it could be resumed.
func TestReleaseDuringPause(t *testing.T) {
	n := newRacingNode(t)
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t, "task-1")
	begun, proceed := n.holdArchives()
	paused := make(chan error, 1)
	go func() {
		_, err := m.Pause(ctx, "acme", l.ID, false)
		paused <- err
	}()
	<-begun
	if err := m.Release(ctx, "acme", l.ID); err != nil {
		t.Fatalf("the release during the pause: %v", err)
	}
	proceed()
	if err := <-paused; !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("the pause of a lease released meanwhile = %v; want ErrLeaseNotFound", err)
	}
	if all, err := m.PausedLeases(ctx, "acme"); err != nil || len(all) != 0 {
		t.Fatalf("paused leases after the release: %+v, %v; want none", all, err)
	}
	if ss, err := m.Snapshots(ctx, "acme"); err != nil || len(ss) != 0 {
		t.Fatalf("what is kept of the released lease: %+v, %v; want nothing", ss, err)
	}
	if err := n.resume(t, l); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("resuming the released lease = %v; want ErrLeaseNotFound", err)
	}
}

// A pause that ends the lease while a release of it is under way wins: the release, finding
// the lease paused, fails as not found (the API then releases the paused lease: its state is
// deleted), and it neither tears down a second time nor records a second end.
func TestPauseBeforeRelease(t *testing.T) {
	n := newRacingNode(t)
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t, "task-1")
	if _, err := m.Pause(ctx, "acme", l.ID, false); err != nil {
		t.Fatal(err)
	}
	// The release read the lease before the pause ended it (what Held returned then).
	if err := pool.EndAsRelease(m, l); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("a release of the lease the pause ended = %v; want ErrLeaseNotFound", err)
	}
	if n.released.Load() != 0 {
		t.Fatalf("the late release released the lease's credentials %d times; the pause revoked them, and a resume mints again", n.released.Load())
	}
	if err := m.ReleasePaused(ctx, "acme", l.ID); err != nil {
		t.Fatalf("releasing the paused lease: %v", err)
	}
}

// A late end of a lease (a release that read it before a pause, or an expiry) does not touch
// the lease once it has been paused and resumed: the resumed lease is another sandbox, whose
// record and binding are its own.
func TestLateEndSparesTheResumedLease(t *testing.T) {
	n := newRacingNode(t)
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t, "task-1")
	if _, err := m.Pause(ctx, "acme", l.ID, false); err != nil {
		t.Fatal(err)
	}
	if err := n.resume(t, l); err != nil {
		t.Fatal(err)
	}
	if err := pool.EndAsRelease(m, l); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("a late release of the paused incarnation = %v; want ErrLeaseNotFound", err)
	}
	r, err := m.Get(ctx, "acme", l.ID)
	if err != nil {
		t.Fatalf("the resumed lease after a late end of its paused incarnation: %v", err)
	}
	if r.Sandbox.ID == l.Sandbox.ID || n.e.Runtime.Destroyed(r.Sandbox.ID) {
		t.Fatalf("the resumed lease's sandbox %s (destroyed %v); want a new one, running", r.Sandbox.ID, n.e.Runtime.Destroyed(r.Sandbox.ID))
	}
}

// Two pauses of one lease at once: the second is refused while the first archives, so one
// snapshot is the paused lease's state, and the lease is paused once.
func TestPauseTwiceAtOnce(t *testing.T) {
	n := newRacingNode(t)
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t, "task-1")
	begun, proceed := n.holdArchives()
	paused := make(chan error, 1)
	go func() {
		_, err := m.Pause(ctx, "acme", l.ID, false)
		paused <- err
	}()
	<-begun
	if _, err := m.Pause(ctx, "acme", l.ID, false); !errors.Is(err, pool.ErrLeaseState) {
		t.Fatalf("a second pause while the first archives = %v; want ErrLeaseState", err)
	}
	if _, err := m.Snapshot(ctx, "acme", l.ID, pool.SnapshotRequest{}); !errors.Is(err, pool.ErrLeaseState) {
		t.Fatalf("a snapshot while a pause archives = %v; want ErrLeaseState", err)
	}
	proceed()
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	if err := n.resume(t, l); err != nil {
		t.Fatalf("resuming the paused lease: %v", err)
	}
}

// A resume's claim lasts as long as a resume may take; one that takes longer (a large
// workspace from a slow store) lets a second resume of the lease claim it too. The second
// must still not bind the lease id a second time: two sandboxes bound under one lease, one of
// them with no record a release could end, would run on with the task's scopes after the
// lease was released. The store binds a lease id once.
func TestSlowResumeAndASecond(t *testing.T) {
	n := newRacingNode(t)
	ctx := context.Background()
	m := n.e.Manager
	l := n.lease(t, "task-1")
	if _, err := m.Pause(ctx, "acme", l.ID, false); err != nil {
		t.Fatal(err)
	}
	n.e.MustWarm(t, 2)
	begun, proceed := n.holdNext("restore")
	first := make(chan error, 1)
	go func() { first <- n.resume(t, l) }()
	<-begun
	// The first resume's claim runs out (as its time would) while it restores.
	if err := n.e.RDB.Del(ctx, "n1:jti:resume:"+l.ID).Err(); err != nil {
		t.Fatal(err)
	}
	second := n.resume(t, l)
	proceed()
	firstErr := <-first
	if (firstErr == nil) == (second == nil) {
		t.Fatalf("two resumes of one lease: %v and %v; want one bound, the other refused", firstErr, second)
	}
	if err := m.Release(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	// pooltest.Runtime gives its n-th sandbox the address 10.0.0.n.
	for i := 1; i <= n.e.Runtime.Created(); i++ {
		addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if b, err := n.e.Store.Lookup(ctx, "n1", addr); err == nil {
			t.Fatalf("after the release, %s is still bound to lease %s (sandbox %s)", addr, b.Lease, b.Sandbox)
		}
	}
}

// A resumed lease keeps its id, under which the broker keeps what it mints: a mint for a
// request of the paused sandbox that was in flight when the pause revoked (the gateway cuts
// such requests when it hears of the unbind, which may come after) would be kept under the id
// and handed to the resumed lease. The resume revokes what this node's broker holds for the
// lease before it binds it, so nothing minted before the resume serves it.
func TestResumeRevokesFirst(t *testing.T) {
	n := newRacingNode(t)
	ctx := context.Background()
	l := n.lease(t, "task-1")
	if _, err := n.e.Manager.Pause(ctx, "acme", l.ID, false); err != nil {
		t.Fatal(err)
	}
	if c := <-n.revokes; c.lease != l.ID || c.bound {
		t.Fatalf("the pause revoked %+v; want lease %s, once unbound", c, l.ID)
	}
	if err := n.resume(t, l); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-n.revokes:
		if c.lease != l.ID || c.bound {
			t.Fatalf("the resume revoked %+v; want lease %s, before it is bound", c, l.ID)
		}
	default:
		t.Fatalf("the resume bound lease %s without revoking what the broker held for it", l.ID)
	}
}

// A resume whose caller goes away once the lease is bound (a client's timeout) has resumed the
// lease: what its pause kept goes all the same. It stayed, and the running lease was listed as
// paused too; once released, it could be resumed again from the pause's state, which the
// release was to end.
func TestResumeCallerGoesAway(t *testing.T) {
	n := newRacingNode(t)
	l := n.lease(t, "task-1")
	if _, err := n.e.Manager.Pause(context.Background(), "acme", l.ID, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hangUp := func(r audit.Record) {
		if r.Event == audit.EventResume {
			cancel()
		}
	}
	n.onRecord.Store(&hangUp)
	tok, err := n.e.Issuer.Mint(l.Task, "acme", []scope.Scope{{Host: "a.example"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.e.Manager.Resume(ctx, pool.ResumeRequest{Tenant: "acme", Lease: l.ID, Token: tok}); err != nil {
		t.Fatalf("the resume: %v", err)
	}
	n.onRecord.Store(nil)
	bg := context.Background()
	if all, err := n.e.Manager.PausedLeases(bg, "acme"); err != nil || len(all) != 0 {
		t.Fatalf("paused leases after the resume: %+v, %v; want none", all, err)
	}
	if err := n.e.Manager.Release(bg, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := n.resume(t, l); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Fatalf("resuming the released lease = %v; want ErrLeaseNotFound", err)
	}
}

// A release of a paused lease is carried out whether or not its caller waits for the answer,
// as a release of a running lease is: what the pause kept goes.
func TestReleasePausedCallerGone(t *testing.T) {
	n := newRacingNode(t)
	l := n.lease(t, "task-1")
	bg := context.Background()
	if _, err := n.e.Manager.Pause(bg, "acme", l.ID, false); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(bg)
	cancel()
	if err := n.e.Manager.ReleasePaused(gone, "acme", l.ID); err != nil {
		t.Fatalf("releasing the paused lease for a caller that has gone: %v", err)
	}
	if all, err := n.e.Manager.PausedLeases(bg, "acme"); err != nil || len(all) != 0 {
		t.Fatalf("paused leases after the release: %+v, %v; want none", all, err)
	}
}

// A release of a paused lease that a resume is bringing back is refused as the wrong state:
// it deleted the pause and answered released, and the resume went on to bind the lease, which
// ran on after its release.
func TestReleasePausedDuringResume(t *testing.T) {
	n := newRacingNode(t)
	l := n.lease(t, "task-1")
	bg := context.Background()
	if _, err := n.e.Manager.Pause(bg, "acme", l.ID, false); err != nil {
		t.Fatal(err)
	}
	begun, proceed := n.holdNext("restore")
	resumed := make(chan error, 1)
	go func() { resumed <- n.resume(t, l) }()
	<-begun
	err := n.e.Manager.ReleasePaused(bg, "acme", l.ID)
	proceed()
	if rerr := <-resumed; rerr != nil {
		t.Fatalf("the resume: %v", rerr)
	}
	if !errors.Is(err, pool.ErrLeaseState) {
		t.Fatalf("releasing the paused lease while it is resumed = %v; want ErrLeaseState", err)
	}
	if _, err := n.e.Manager.Get(bg, "acme", l.ID); err != nil {
		t.Fatalf("the resumed lease: %v", err)
	}
}
