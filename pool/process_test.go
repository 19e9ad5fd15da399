package pool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// fakeProcs stands in for the runtime's exec: a command "count N" writes N numbered lines, one
// every 10 ms, then exits 3; "big" writes more than a process's kept output; a signal ends the
// process its marker names with 143.
type fakeProcs struct {
	mu      sync.Mutex
	stop    map[string]chan string
	signals []string
}

func (f *fakeProcs) exec(ctx context.Context, _ pool.Sandbox, req pool.ExecRequest, _ io.Reader, stdout, stderr io.Writer) (int, error) {
	if req.Cmd[0] == "sh" {
		return 0, nil // the node's own scripts (the workspace read at release)
	}
	f.mu.Lock()
	sig := make(chan string, 1)
	f.stop[req.Marker] = sig
	f.mu.Unlock()
	switch req.Cmd[0] {
	case "big":
		chunk := strings.Repeat("x", 64<<10)
		for range (pool.ProcessOutputKept / len(chunk)) + 4 {
			io.WriteString(stdout, chunk)
		}
		return 0, nil
	case "count":
		var n int
		fmt.Sscan(req.Cmd[1], &n)
		for i := range n {
			fmt.Fprintf(stdout, "line %d\n", i)
			select {
			case s := <-sig:
				fmt.Fprintf(stderr, "got %s\n", s)
				return 143, nil
			case <-ctx.Done():
				return -1, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		fmt.Fprintln(stderr, "done")
		return 3, nil
	}
	<-ctx.Done()
	return -1, ctx.Err()
}

func (f *fakeProcs) signal(_ context.Context, _ pool.Sandbox, marker, sig string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, sig)
	if c := f.stop[marker]; c != nil {
		c <- sig
	}
	return nil
}

// TestBackgroundProcesses: a process started in the background outlives the call that started
// it; its output is read from any offset, waiting for more while it runs; it can be signalled
// and waited for; what is not kept is counted as dropped; other tenants see nothing of it; and
// the lease's release ends it. Each step is an exec record of the lease.
func TestBackgroundProcesses(t *testing.T) {
	f := &fakeProcs{stop: map[string]chan string{}}
	sink := &recordSink{}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 1, MaxTotal: 4}},
		Runtime: func(rt *pooltest.Runtime) { rt.ExecFunc, rt.SignalFunc = f.exec, f.signal },
		Pool:    func(c *pool.Config) { c.Audit = sink }})
	e.MustWarm(t, 1)
	tok, _ := e.Issuer.Mint("task-procs", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	ctx := context.Background()
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	callCtx, endCall := context.WithCancel(ctx)
	p, err := e.Manager.StartProcess(callCtx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"count", "20"}})
	endCall() // the call that started it is over
	if err != nil || !p.Running || !strings.HasPrefix(p.ID, "p-") {
		t.Fatalf("start: %+v %v", p, err)
	}
	// Read from offset 0 with waits until it ends; the pieces join into the whole output.
	var out strings.Builder
	var off, errOff int64
	for range 200 {
		o, err := e.Manager.ProcessOutput(ctx, "acme", l.ID, p.ID, off, errOff, 0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(o.Stdout)
		off, errOff = o.StdoutOffset, o.StderrOffset
		if !o.Process.Running && len(o.Stdout) == 0 {
			if o.Process.ExitCode == nil || *o.Process.ExitCode != 3 {
				t.Errorf("ended with %+v, want exit 3", o.Process)
			}
			break
		}
	}
	if got := strings.Count(out.String(), "\n"); got != 20 || !strings.HasPrefix(out.String(), "line 0\nline 1\n") {
		t.Errorf("read %d lines in pieces:\n%s", got, out.String())
	}
	// A second reader from an offset of its own sees the same bytes from there.
	o, _ := e.Manager.ProcessOutput(ctx, "acme", l.ID, p.ID, 7, 0, 0, 0)
	if !strings.HasPrefix(string(o.Stdout), "line 1\n") || string(o.Stderr) != "done\n" {
		t.Errorf("from offset 7: %q / %q", o.Stdout, o.Stderr)
	}

	// Signalled: it ends, and an ended process is not signalled again.
	q, _ := e.Manager.StartProcess(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"count", "100000"}})
	if err := e.Manager.SignalProcess(ctx, "acme", l.ID, q.ID, "SEGV"); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("a signal not on the list: %v", err)
	}
	if err := e.Manager.SignalProcess(ctx, "acme", l.ID, q.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	w, _ := e.Manager.WaitProcess(ctx, "acme", l.ID, q.ID, 5*time.Second)
	if w.Running || w.ExitCode == nil || *w.ExitCode != 143 {
		t.Errorf("after TERM: %+v", w)
	}
	if err := e.Manager.SignalProcess(ctx, "acme", l.ID, q.ID, "KILL"); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("signalling an ended process: %v", err)
	}

	// Output beyond what is kept: the reader from 0 is told how much it missed.
	b, _ := e.Manager.StartProcess(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"big"}})
	e.Manager.WaitProcess(ctx, "acme", l.ID, b.ID, 5*time.Second)
	o, _ = e.Manager.ProcessOutput(ctx, "acme", l.ID, b.ID, 0, 0, 0, 0)
	if o.StdoutDropped == 0 || int64(len(o.Stdout))+o.StdoutDropped != o.StdoutOffset || len(o.Stdout) != pool.ProcessOutputKept {
		t.Errorf("big output: kept %d, dropped %d, next offset %d", len(o.Stdout), o.StdoutDropped, o.StdoutOffset)
	}

	// Another tenant sees neither the lease nor its processes.
	if _, err := e.Manager.Processes(ctx, "globex", l.ID); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Errorf("another tenant listing: %v", err)
	}
	if _, err := e.Manager.ProcessOutput(ctx, "globex", l.ID, p.ID, 0, 0, 0, 0); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Errorf("another tenant reading: %v", err)
	}
	if _, err := e.Manager.ProcessOutput(ctx, "acme", l.ID, "p-nope", 0, 0, 0, 0); !errors.Is(err, pool.ErrNoSuchProcess) {
		t.Errorf("an unknown process: %v", err)
	}

	// Release ends what still runs.
	r, _ := e.Manager.StartProcess(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"forever"}})
	if err := e.Manager.Release(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Manager.AwaitEnd(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	_, started := f.stop[""]
	f.mu.Unlock()
	if started {
		t.Error("a process was started without a marker")
	}
	if ps, err := e.Manager.Processes(ctx, "acme", l.ID); err == nil {
		t.Errorf("the released lease still lists processes: %+v", ps)
	}
	events := map[audit.Event]int{}
	for _, rec := range sink.kind(audit.KindExec) {
		if rec.Lease == l.ID {
			events[rec.Event]++
			if rec.Process == "" {
				t.Errorf("an exec record without its process: %+v", rec)
			}
		}
	}
	if events["process-start"] != 4 || events["process-exit"] != 4 || events["process-signal"] != 1 {
		t.Errorf("exec records by event: %v (the forever process %s)", events, r.ID)
	}
}
