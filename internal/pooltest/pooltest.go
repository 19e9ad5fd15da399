// Package pooltest provides a pool.Runtime that starts nothing, for tests and benchmarks of the
// pool, its API and its store: the lease path never touches the runtime, so it can be exercised
// without a container engine.
package pooltest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/pool"
)

// Runtime registers sandboxes with unique 10.x addresses and records what is destroyed. The
// zero value is ready. Safe for concurrent use.
type Runtime struct {
	// Gate, when set before use, holds every Create until it is closed (an empty pool).
	Gate chan struct{}
	// Running is what List reports (sandboxes left by an earlier run).
	Running []pool.Sandbox
	// Node is the node its sandboxes belong to; empty means "n1".
	Node string
	// Addr, when set, is every sandbox's address (a test server standing in for them).
	Addr netip.Addr
	// CheckDelay, set before use, makes every Check take that long.
	CheckDelay time.Duration
	// ListHook, set before use, is called at the start of every List (a slow runtime at start).
	ListHook func()
	// ExecFunc and SignalFunc, set before use, stand in for Exec (which otherwise runs nothing
	// and exits 0) and Signal (otherwise a no-op).
	ExecFunc   func(ctx context.Context, sb pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error)
	SignalFunc func(ctx context.Context, sb pool.Sandbox, marker, sig string) error

	imageMu  sync.Mutex
	image    string // "" means "sha256:test"
	imageErr error

	n          atomic.Uint32
	sick       sync.Map
	mu         sync.Mutex
	destroyed  []string
	destroyErr error
}

// FailDestroy makes every later Destroy fail with err.
func (r *Runtime) FailDestroy(err error) {
	r.mu.Lock()
	r.destroyErr = err
	r.mu.Unlock()
}

var _ pool.Runtime = (*Runtime)(nil)

// Create returns a new sandbox at once (or when Gate opens).
func (r *Runtime) Create(ctx context.Context, t pool.Template) (pool.Sandbox, error) {
	if r.Gate != nil {
		select {
		case <-r.Gate:
		case <-ctx.Done():
			return pool.Sandbox{}, ctx.Err()
		}
	}
	n := r.n.Add(1)
	node, id := r.Node, fmt.Sprintf("sb-%d", n)
	if node == "" {
		node = "n1"
	} else {
		id = fmt.Sprintf("sb-%s-%d", node, n)
	}
	addr := r.Addr
	if !addr.IsValid() {
		addr = netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
	}
	return pool.Sandbox{ID: id, Template: t.Name, Node: node, Addr: addr, Created: time.Now()}, nil
}

// Image reports the image SetImage last gave (or its error): a rebuild is SetImage with a new id.
func (r *Runtime) Image(context.Context, pool.Template) (string, error) {
	r.imageMu.Lock()
	defer r.imageMu.Unlock()
	if r.imageErr != nil {
		return "", r.imageErr
	}
	if r.image == "" {
		return "sha256:test", nil
	}
	return r.image, nil
}

// SetImage makes Image report id, or err when it is not nil.
func (r *Runtime) SetImage(id string, err error) {
	r.imageMu.Lock()
	r.image, r.imageErr = id, err
	r.imageMu.Unlock()
}

// Created is how many sandboxes Create has made.
func (r *Runtime) Created() int { return int(r.n.Load()) }

// Exec calls ExecFunc when set, and otherwise runs nothing and exits 0.
func (r *Runtime) Exec(ctx context.Context, sb pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if r.ExecFunc != nil {
		return r.ExecFunc(ctx, sb, req, stdin, stdout, stderr)
	}
	return 0, nil
}

// Signal calls SignalFunc when set.
func (r *Runtime) Signal(ctx context.Context, sb pool.Sandbox, marker, sig string) error {
	if r.SignalFunc != nil {
		return r.SignalFunc(ctx, sb, marker, sig)
	}
	return nil
}

// Check fails for sandboxes marked with SetSick.
func (r *Runtime) Check(_ context.Context, sb pool.Sandbox) error {
	time.Sleep(r.CheckDelay)
	if _, sick := r.sick.Load(sb.ID); sick {
		return errors.New("probe failed")
	}
	return nil
}

// SetSick makes id fail its health checks.
func (r *Runtime) SetSick(id string) { r.sick.Store(id, true) }

// Destroy records id; like an engine's call, it fails on a context that has ended.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	if r.destroyErr != nil {
		defer r.mu.Unlock()
		return r.destroyErr
	}
	r.destroyed = append(r.destroyed, id)
	r.mu.Unlock()
	return nil
}

// Destroyed reports whether id was destroyed.
func (r *Runtime) Destroyed(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.destroyed {
		if d == id {
			return true
		}
	}
	return false
}

// Alive is how many sandboxes Create made that Destroy has not removed.
func (r *Runtime) Alive() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Created() - len(r.destroyed)
}

// List reports Running, after ListHook.
func (r *Runtime) List(context.Context) ([]pool.Sandbox, error) {
	if r.ListHook != nil {
		r.ListHook()
	}
	return r.Running, nil
}

// Template returns t with every field Template.Validate requires and t leaves empty filled in
// with small valid values, so tests name only what they are about.
func Template(t pool.Template) pool.Template {
	fill := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if t.Name == "" {
		t.Name = "default"
	}
	if t.Image == "" {
		t.Image = "test/image"
	}
	if t.User == "" {
		t.User = "10001:10001"
	}
	if t.Workdir == "" {
		t.Workdir = "/workspace"
	}
	if t.CPUs == 0 {
		t.CPUs = 1
	}
	if t.Runtime == "" {
		t.Runtime = "runc"
	}
	fill(&t.MemoryMB, 64)
	fill(&t.Pids, 64)
	fill(&t.WorkspaceMB, 16)
	fill(&t.TmpMB, 16)
	fill(&t.NoFile, 1024)
	fill(&t.NProc, 1024)
	if t.DefaultTTL == 0 {
		t.DefaultTTL = time.Minute
	}
	if t.MaxTTL == 0 {
		t.MaxTTL = time.Hour
	}
	return t
}
