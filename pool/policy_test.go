package pool_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/inside"
)

// policyRuntime is a runtime whose command "sleep" runs until its context ends, "exit 1"
// fails at once and any other ends at once; it records what each was asked to run and every
// signal sent.
type policyRuntime struct {
	pooltest.Runtime
	mu      sync.Mutex
	reqs    []pool.ExecRequest
	signals []string // marker + " " + signal
	started chan struct{}
}

func newPolicyRuntime(t *testing.T) *policyRuntime {
	t.Helper()
	f := &policyRuntime{started: make(chan struct{}, 16)}
	f.ExecFunc = func(ctx context.Context, _ pool.Sandbox, req pool.ExecRequest, _ io.Reader, _, stderr io.Writer) (int, error) {
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		f.mu.Unlock()
		switch req.Cmd[0] {
		case "sleep":
			f.started <- struct{}{}
			<-ctx.Done()
			return -1, ctx.Err()
		case "exit":
			io.WriteString(stderr, "  said why\n")
			if req.Cmd[1] == "1" {
				return 1, nil
			}
		}
		return 0, nil
	}
	f.SignalFunc = func(ctx context.Context, _ pool.Sandbox, marker, sig string) error {
		if ctx.Err() != nil {
			t.Errorf("the kill was sent under an ended context: %v", ctx.Err())
		}
		f.mu.Lock()
		f.signals = append(f.signals, marker+" "+sig)
		f.mu.Unlock()
		return nil
	}
	return f
}

func (f *policyRuntime) seen() ([]pool.ExecRequest, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs), slices.Clone(f.signals)
}

// waitStarted waits, at most 10 seconds, for the runtime to start a command.
func (f *policyRuntime) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-f.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not start within 10s")
	}
}

// TestPolicyTimeout: a command that outlives its timeout is killed through Signal by a marker
// the policy chose, and fails with ErrTimedOut in the words every backend used; a command
// that ends in time is untouched.
func TestPolicyTimeout(t *testing.T) {
	f := newPolicyRuntime(t)
	rt := pool.WithPolicy(f)
	code, err := rt.Exec(context.Background(), pool.Sandbox{}, pool.ExecRequest{Cmd: []string{"sleep"}, Timeout: 20 * time.Millisecond},
		nil, io.Discard, io.Discard)
	if code != -1 || !errors.Is(err, pool.ErrTimedOut) || err.Error() != "command timed out after 20ms and was killed" {
		t.Fatalf("a command past its timeout: %d %v", code, err)
	}
	reqs, signals := f.seen()
	if len(reqs) != 1 || reqs[0].Marker == "" {
		t.Fatalf("the command ran without a marker: %+v", reqs)
	}
	if want := []string{reqs[0].Marker + " KILL"}; !slices.Equal(signals, want) {
		t.Fatalf("signals %q, want %q", signals, want)
	}

	code, err = rt.Exec(context.Background(), pool.Sandbox{}, pool.ExecRequest{Cmd: []string{"exit", "1"}, Timeout: time.Minute},
		nil, io.Discard, io.Discard)
	if code != 1 || err != nil {
		t.Fatalf("a command that ended in time: %d %v", code, err)
	}
	if _, signals := f.seen(); len(signals) != 1 {
		t.Fatalf("a command that ended in time was signalled: %q", signals)
	}
}

// TestPolicyCallerGivesUp: when the caller's context ends, the command is killed by its marker
// (chosen, or the caller's own) and Exec returns the caller's error, not ErrTimedOut; a command
// with neither timeout nor terminal nor marker is given one too, and killed by it.
func TestPolicyCallerGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		req    pool.ExecRequest
		marker string // "*" one the policy chose, else this one
	}{
		{"with a timeout", pool.ExecRequest{Cmd: []string{"sleep"}, Timeout: time.Minute}, "*"},
		{"with a marker of its own", pool.ExecRequest{Cmd: []string{"sleep"}, Marker: "m1"}, "m1"},
		{"with a marker of its own and a timeout", pool.ExecRequest{Cmd: []string{"sleep"}, Marker: "m2", Timeout: time.Minute}, "m2"},
		{"on a terminal", pool.ExecRequest{Cmd: []string{"sleep"}, TTY: true}, "*"},
		{"with none", pool.ExecRequest{Cmd: []string{"sleep"}}, "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPolicyRuntime(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := pool.WithPolicy(f).Exec(ctx, pool.Sandbox{}, tc.req, nil, io.Discard, io.Discard)
				done <- err
			}()
			f.waitStarted(t)
			cancel()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Exec did not return within 10s of its caller giving up")
			}
			if !errors.Is(err, context.Canceled) || errors.Is(err, pool.ErrTimedOut) {
				t.Fatalf("Exec's error: %v, want the caller's", err)
			}
			reqs, signals := f.seen()
			got := reqs[0].Marker
			switch tc.marker {
			case "*":
				if got == "" {
					t.Fatal("no marker was chosen")
				}
			default:
				if got != tc.marker {
					t.Fatalf("marker %q, want the caller's %q", got, tc.marker)
				}
			}
			if want := []string{got + " KILL"}; !slices.Equal(signals, want) {
				t.Fatalf("signals %q, want %q", signals, want)
			}
		})
	}
}

// TestPolicyOnce: the policy over a runtime already under it is that runtime: one kill, one
// error, not two.
func TestPolicyOnce(t *testing.T) {
	f := newPolicyRuntime(t)
	rt := pool.WithPolicy(pool.WithPolicy(f))
	if rt != pool.WithPolicy(f) {
		t.Fatal("the policy was applied twice")
	}
	_, err := rt.Exec(context.Background(), pool.Sandbox{}, pool.ExecRequest{Cmd: []string{"sleep"}, Timeout: time.Millisecond},
		nil, io.Discard, io.Discard)
	if _, signals := f.seen(); !errors.Is(err, pool.ErrTimedOut) || len(signals) != 1 {
		t.Fatalf("%v, signals %q", err, signals)
	}
}

// TestFollowResize: each size sent resizes the terminal found by the command's marker, in
// order, until the sizes end; without a marker, sizes are read and nothing runs.
func TestFollowResize(t *testing.T) {
	f := newPolicyRuntime(t)
	sizes := make(chan pool.TermSize, 2)
	sizes <- pool.TermSize{Rows: 50, Cols: 120}
	sizes <- pool.TermSize{Rows: 10, Cols: 20}
	close(sizes)
	pool.FollowResize(context.Background(), f, pool.Sandbox{}, "m1", sizes)
	reqs, _ := f.seen()
	want := [][]string{inside.ResizeCmd("m1", 50, 120), inside.ResizeCmd("m1", 10, 20)}
	if len(reqs) != len(want) {
		t.Fatalf("ran %d commands, want %d", len(reqs), len(want))
	}
	for i, r := range reqs {
		if !slices.Equal(r.Cmd, want[i]) {
			t.Errorf("resize %d ran %q, want %q", i, r.Cmd, want[i])
		}
	}

	f = newPolicyRuntime(t)
	sizes = make(chan pool.TermSize, 1)
	sizes <- pool.TermSize{Rows: 1, Cols: 1}
	close(sizes)
	pool.FollowResize(context.Background(), f, pool.Sandbox{}, "", sizes)
	if reqs, _ := f.seen(); len(reqs) != 0 {
		t.Fatalf("resized with no marker: %+v", reqs)
	}
}

// TestFollowResizeBeforeTheTerminal: a size sent before the command's terminal exists is tried
// again until it does, and a newer size sent meanwhile replaces it.
func TestFollowResizeBeforeTheTerminal(t *testing.T) {
	var mu sync.Mutex
	var ran [][]string
	missing := 2 // the terminal appears at the third look
	rt := &pooltest.Runtime{ExecFunc: func(_ context.Context, _ pool.Sandbox, req pool.ExecRequest, _ io.Reader, _, _ io.Writer) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, req.Cmd)
		if missing > 0 {
			missing--
			return inside.ResizeNoTerminal, nil
		}
		return 0, nil
	}}
	sizes := make(chan pool.TermSize, 1)
	sizes <- pool.TermSize{Rows: 40, Cols: 120}
	close(sizes)
	pool.FollowResize(context.Background(), rt, pool.Sandbox{}, "m1", sizes)
	want := inside.ResizeCmd("m1", 40, 120)
	if len(ran) != 3 || !slices.Equal(ran[2], want) {
		t.Fatalf("ran %q, want the resize three times, until the terminal was there", ran)
	}

	// A newer size sent while the first waits for the terminal is the one applied.
	ran, missing = nil, 1<<30
	sizes = make(chan pool.TermSize)
	done := make(chan struct{})
	go func() { pool.FollowResize(context.Background(), rt, pool.Sandbox{}, "m1", sizes); close(done) }()
	sizes <- pool.TermSize{Rows: 1, Cols: 1}
	mu.Lock()
	missing = 0 // the terminal is there for the next look
	mu.Unlock()
	sizes <- pool.TermSize{Rows: 50, Cols: 160}
	close(sizes)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("FollowResize did not end within 10s of its sizes ending")
	}
	if last := ran[len(ran)-1]; !slices.Equal(last, inside.ResizeCmd("m1", 50, 160)) {
		t.Fatalf("last resize %q, want the newer size", last)
	}
}

// TestProbe: the health probe runs under the policy within ProbeTimeout, and its error says
// whether the probe could not run or the sandbox failed it, with what it wrote.
func TestProbe(t *testing.T) {
	f := newPolicyRuntime(t)
	if err := pool.Probe(context.Background(), f, pool.Sandbox{}, "sb1", []string{"exit", "0"}); err != nil {
		t.Fatalf("a passing probe: %v", err)
	}
	reqs, _ := f.seen()
	if reqs[0].Timeout != pool.ProbeTimeout || reqs[0].Marker == "" {
		t.Fatalf("the probe ran without the policy: %+v", reqs[0])
	}
	err := pool.Probe(context.Background(), f, pool.Sandbox{}, "sb1", []string{"exit", "1"})
	if err == nil || err.Error() != "sandbox sb1 cannot reach the gateway and resolver: said why" {
		t.Fatalf("a failing probe: %v", err)
	}
	boom := errors.New("boom")
	f.ExecFunc = func(context.Context, pool.Sandbox, pool.ExecRequest, io.Reader, io.Writer, io.Writer) (int, error) {
		return -1, boom
	}
	err = pool.Probe(context.Background(), f, pool.Sandbox{}, "sb1", []string{"exit", "0"})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "health probe in sb1: ") {
		t.Fatalf("a probe that could not run: %v", err)
	}
}
