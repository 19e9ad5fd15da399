package pool_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// TestReleaseCutsExecsUnderWay: a command running in a lease when it is released (an
// interactive shell, a long build) is ended by the release, though the sandbox runs on until
// its end is finished: from the release's answer no caller's input reaches the sandbox and
// nothing it does streams back.
func TestReleaseCutsExecsUnderWay(t *testing.T) {
	st := &steps{}
	hold := make(chan struct{})
	defer close(hold)
	running := make(chan struct{})
	var rt *pooltest.Runtime
	e := pooltest.NewEnv(t, pooltest.EnvConfig{
		Runtime: func(r *pooltest.Runtime) {
			rt = r
			r.ExecFunc = func(ctx context.Context, _ pool.Sandbox, req pool.ExecRequest, _ io.Reader, _, _ io.Writer) (int, error) {
				if len(req.Cmd) == 1 && req.Cmd[0] == "shell" {
					close(running)
					<-ctx.Done() // an interactive shell: it runs until its caller's context ends
					return -1, ctx.Err()
				}
				return 0, nil
			}
		},
		Pool: func(c *pool.Config) { c.Runtime = &heldDestroys{Runtime: rt, hold: hold, steps: st} },
	})
	e.MustWarm(t, 1)
	ctx := context.Background()
	tok, _ := e.Issuer.Mint("task-exec-cut", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() {
		_, err := e.Manager.Exec(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"shell"}}, nil, io.Discard, io.Discard)
		ran <- err
	}()
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not start within 10 s")
	}
	if err := e.Manager.Release(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if !errors.Is(err, pool.ErrLeaseNotFound) {
			t.Fatalf("the command cut by the release: %v, want ErrLeaseNotFound", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a command under way ran on for 10 s after its lease's release answered, in the sandbox still running")
	}
}
