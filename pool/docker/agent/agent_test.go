package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// startAgent runs this test binary as the agent (the package's init takes it over), as the
// node runs its own executable in a sandbox.
func startAgent(t *testing.T) (*Conn, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), Env+"=1", "AGENT_TEST_BASE=from-agent")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := NewConn(out, in, func() { in.Close() })
	t.Cleanup(func() { c.Close(); cmd.Wait() })
	return c, cmd
}

func run(t *testing.T, c *Conn, cmd Command, stdin io.Reader) (int, string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, err := c.Run(ctx, cmd, stdin, &out, &errOut)
	return code, out.String(), errOut.String(), err
}

func TestAgentRunsCommands(t *testing.T) {
	c, _ := startAgent(t)
	cases := []struct {
		name      string
		cmd       Command
		stdin     io.Reader
		code      int
		out, errs string
	}{
		{"output and exit code", Command{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, nil, 3, "out\n", "err\n"},
		{"environment added and replaced, the agent's variable gone", Command{Argv: []string{"sh", "-c", `echo "$AGENT_TEST_BASE $EXTRA ${` + Env + `:-unset}"`},
			Env: []string{"EXTRA=x", "AGENT_TEST_BASE=replaced"}}, nil, 0, "replaced x unset\n", ""},
		{"working directory", Command{Argv: []string{"pwd"}, Dir: "/tmp"}, nil, 0, "/tmp\n", ""},
		{"standard input", Command{Argv: []string{"cat"}, Stdin: true}, strings.NewReader(strings.Repeat("abc", 50000)), 0, strings.Repeat("abc", 50000), ""},
		{"no input: an empty one", Command{Argv: []string{"cat"}}, nil, 0, "", ""},
		{"not found", Command{Argv: []string{"no-such-program-here"}}, nil, 127, "", `exec: "no-such-program-here": executable file not found in $PATH` + "\n"},
		{"a path as the engine takes it", Command{Argv: []string{"/bin/sh", "-c", "exit 0"}}, nil, 0, "", ""},
		{"a signal is 128 and its number", Command{Argv: []string{"sh", "-c", "kill -TERM $$"}}, nil, 143, "", ""},
		{"output kept open by what it left running", Command{Argv: []string{"sh", "-c", "(sleep 0.3; echo late) & echo now"}}, nil, 0, "now\nlate\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs, err := run(t, c, tc.cmd, tc.stdin)
			if err != nil || code != tc.code || out != tc.out || errs != tc.errs {
				t.Fatalf("exit %d (want %d), stdout %.80q (want %.80q), stderr %q (want %q), err %v", code, tc.code, out, tc.out, errs, tc.errs, err)
			}
		})
	}
}

func TestAgentRunsCommandsAtOnce(t *testing.T) {
	c, _ := startAgent(t)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, _, err := run(t, c, Command{Argv: []string{"sh", "-c", fmt.Sprintf("sleep 0.1; echo %d; exit %d", i, i)}}, nil)
			if err != nil || code != i || out != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("command %d: exit %d, %q, %v", i, code, out, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestAgentKillsOnCancel: a command whose caller gives up is killed with its process group.
func TestAgentKillsOnCancel(t *testing.T) {
	c, _ := startAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	marker := fmt.Sprintf("/tmp/agent-test-%d", time.Now().UnixNano())
	defer os.Remove(marker)
	start := time.Now()
	_, err := c.Run(ctx, Command{Argv: []string{"sh", "-c", "sleep 30 & sleep 30; touch " + marker}}, nil, io.Discard, io.Discard)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the cancelled command held Run for %s", took)
	}
	// The agent still serves.
	if code, out, _, err := run(t, c, Command{Argv: []string{"echo", "ok"}}, nil); err != nil || code != 0 || out != "ok\n" {
		t.Fatalf("after a kill: exit %d, %q, %v", code, out, err)
	}
}

// TestAgentGone: a command running when the agent dies gets ErrGone marked ErrStarted (it must not
// be run again another way); a command after that gets ErrGone without it.
func TestAgentGone(t *testing.T) {
	c, cmd := startAgent(t)
	done := make(chan error, 1)
	running := make(chan struct{})
	go func() {
		_, err := c.Run(context.Background(), Command{Argv: []string{"sh", "-c", "echo running; exec sleep 30"}}, nil, &firstWrite{c: running}, io.Discard)
		done <- err
	}()
	// The kill comes once the command has written, so it is running under the agent.
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the command wrote nothing within 10 s")
	}
	cmd.Process.Kill()
	select {
	case err := <-done:
		if !errors.Is(err, ErrGone) || !errors.Is(err, ErrStarted) {
			t.Fatalf("running command: %v, want ErrGone and ErrStarted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a command of a dead agent did not return within 10 s")
	}
	if c.Alive() {
		t.Fatal("the agent is dead but reported alive")
	}
	if _, err := c.Run(context.Background(), Command{Argv: []string{"true"}}, nil, io.Discard, io.Discard); !errors.Is(err, ErrGone) || errors.Is(err, ErrStarted) {
		t.Fatalf("after: %v, want ErrGone without ErrStarted", err)
	}
}

// TestNodeRefusesWhatAnAgentShouldNotSend: the node reads the agent as untrusted: an oversized
// frame, an unknown type, a frame only the node sends, or a malformed exit ends the agent, and
// the command waiting gets ErrGone.
func TestNodeRefusesWhatAnAgentShouldNotSend(t *testing.T) {
	for name, bad := range map[string][]byte{
		"oversized":       {Output, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff},
		"unknown type":    {'Z', 0, 0, 0, 1, 0, 0, 0, 0},
		"node's own type": AppendFrame(nil, Frame{Type: Start, ID: 1}),
		"short exit":      AppendFrame(nil, Frame{Type: Exit, ID: 1, Payload: []byte{1}}),
		"cut short":       {Output, 0, 0, 0, 1, 0, 0, 0, 9, 'a'},
	} {
		t.Run(name, func(t *testing.T) {
			pr, pw := io.Pipe()
			closed := make(chan struct{})
			c := NewConn(pr, io.Discard, func() { close(closed) })
			go func() { pw.Write(bad); pw.Close() }()
			_, err := c.Run(context.Background(), Command{Argv: []string{"x"}}, nil, io.Discard, io.Discard)
			if !errors.Is(err, ErrGone) {
				t.Fatalf("err %v, want ErrGone", err)
			}
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("the agent was not closed")
			}
		})
	}
}

// firstWrite closes c on the first write to it.
type firstWrite struct {
	once sync.Once
	c    chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.c) })
	return len(p), nil
}

// stalled is an agent's input that takes nothing (a stopped agent). A write under a deadline
// fails as that deadline passing would, at once, so the test does not wait out writeTimeout; a
// write with no deadline hangs until the test ends, as one to a stopped agent would.
type stalled struct {
	deadline time.Time
	hang     chan struct{}
}

func (s *stalled) SetWriteDeadline(t time.Time) error { s.deadline = t; return nil }
func (s *stalled) Write(p []byte) (int, error) {
	if s.deadline.IsZero() {
		<-s.hang
	}
	return 0, fmt.Errorf("write deadline passed: %w", os.ErrDeadlineExceeded)
}

// TestStoppedAgentIsGivenUp: an agent that stops reading is given up after the write timeout;
// the command waiting on it returns instead of hanging, and later ones are told it is gone.
func TestStoppedAgentIsGivenUp(t *testing.T) {
	pr, _ := io.Pipe()
	s := &stalled{hang: make(chan struct{})}
	t.Cleanup(func() { close(s.hang) })
	c := NewConn(pr, s, func() { pr.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), Command{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrGone) {
			t.Fatalf("err %v, want ErrGone", err)
		}
	case <-time.After(writeTimeout + 10*time.Second):
		t.Fatal("a command to an agent that reads nothing did not return")
	}
	if c.Alive() {
		t.Fatal("an agent that reads nothing is still used")
	}
}

// TestTooLargeIsNotSent: a command over MaxPayload is refused before anything is sent, with an
// error that says it can be run another way, and the agent goes on serving.
func TestTooLargeIsNotSent(t *testing.T) {
	c, _ := startAgent(t)
	_, err := c.Run(context.Background(), Command{Argv: []string{"echo", strings.Repeat("x", MaxPayload)}}, nil, io.Discard, io.Discard)
	if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrStarted) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
	if code, out, _, err := run(t, c, Command{Argv: []string{"echo", "ok"}}, nil); err != nil || code != 0 || out != "ok\n" {
		t.Fatalf("after: exit %d, %q, %v", code, out, err)
	}
}

// TestAgentOutlivesItsConnection: an agent whose commands were started by an earlier
// connection (the main process of a sandbox restored from a checkpoint, which a new connection
// reattaches) refuses a command under an id one of them runs, instead of taking its output and
// its kill for the new command's; and each connection starts its ids elsewhere.
func TestAgentOutlivesItsConnection(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan struct{})
	go func() { Serve(inR, outW); outW.Close(); close(served) }()
	start := func(id uint32, argv ...string) {
		payload := fmt.Sprintf(`{"argv":[%q%s]}`, argv[0], func() string {
			var s string
			for _, a := range argv[1:] {
				s += fmt.Sprintf(",%q", a)
			}
			return s
		}())
		if _, err := inW.Write(AppendFrame(nil, Frame{Type: Start, ID: id, Payload: []byte(payload)})); err != nil {
			t.Fatal(err)
		}
	}
	frames := make(chan Frame, 16)
	go func() {
		var buf []byte
		for {
			f, _, err := ReadFrame(outR, buf)
			if err != nil {
				close(frames)
				return
			}
			f.Payload = append([]byte(nil), f.Payload...)
			frames <- f
		}
	}()
	start(7, "sleep", "30")
	start(7, "echo", "second")
	select {
	case f := <-frames:
		if f.Type != Failed || f.ID != 7 || !strings.Contains(string(f.Payload), "under this id already") {
			t.Fatalf("the second start of id 7 got %q %d %q", f.Type, f.ID, f.Payload)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to a second start of id 7 in 20 s")
	}
	inW.Close() // the agent ends what runs
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not end in 20 s once its input ended")
	}
	a := NewConn(strings.NewReader(""), io.Discard, func() {})
	b := NewConn(strings.NewReader(""), io.Discard, func() {})
	if a.next == b.next {
		t.Errorf("two connections start their ids at the same place (%d)", a.next)
	}
}
