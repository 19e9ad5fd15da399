package agent

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
)

// startKeeper runs this test binary as a keeper (KeepArg), as a sandbox's main process runs
// the node's executable; connect opens a connection over its streams as the node attaches to
// a container's, which a connection's end detaches from without ending them.
func startKeeper(t *testing.T) (connect func() *Conn) {
	connect, _, _ = startKeeperProc(t)
	return connect
}

// startKeeperProc is startKeeper, with the keeper's process and its input.
func startKeeperProc(t *testing.T) (connect func() *Conn, cmd *exec.Cmd, in io.WriteCloser) {
	t.Helper()
	cmd = exec.Command(os.Args[0], KeepArg)
	cmd.Env = append(os.Environ(), "AGENT_TEST_BASE=from-keeper")
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
	var conns []*Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	return func() *Conn {
		c := NewConn(out, in, func() {})
		conns = append(conns, c)
		return c
	}, cmd, in
}

// agentPid runs a command through c that prints its parent's pid and command name: the agent's.
func agentPid(t *testing.T, c *Conn) (int, string) {
	t.Helper()
	code, out, errs, err := run(t, c, Command{Argv: []string{"sh", "-c", `echo $PPID; cat /proc/$PPID/comm`}}, nil)
	if err != nil || code != 0 {
		t.Fatalf("a command through the keeper: exit %d, %s, %v", code, errs, err)
	}
	pid, name, _ := strings.Cut(strings.TrimSpace(out), "\n")
	n, err := strconv.Atoi(pid)
	if err != nil {
		t.Fatalf("a parent pid of %q", out)
	}
	return n, name
}

// TestKeeperRunsAnAgent: a keeper's agent runs commands over the keeper's streams, with the
// keeper's environment, as its own child (not the keeper itself, which a command cannot reach
// through its parent).
func TestKeeperRunsAnAgent(t *testing.T) {
	c := startKeeper(t)()
	code, out, errs, err := run(t, c, Command{Argv: []string{"sh", "-c", `echo "$AGENT_TEST_BASE"; cat; exit 4`}, Stdin: true},
		strings.NewReader(strings.Repeat("x", 100000)))
	if err != nil || code != 4 || out != "from-keeper\n"+strings.Repeat("x", 100000) || errs != "" {
		t.Fatalf("exit %d (want 4), stdout %.40q, stderr %q, err %v", code, out, errs, err)
	}
	if _, name := agentPid(t, c); name != "agent.test" && !strings.HasPrefix(name, "agent") {
		t.Fatalf("the command's parent is %q, want the agent (this test binary)", name)
	}
}

// TestKeeperReplacesAKilledAgent: an agent killed from inside (by a command it runs) ends its
// connection with ErrGone, as an agent's end of stream does, the command told it may have run;
// the keeper starts another, which the next connection on the same streams reaches.
func TestKeeperReplacesAKilledAgent(t *testing.T) {
	connect := startKeeper(t)
	c := connect()
	first, _ := agentPid(t, c)
	_, _, _, err := run(t, c, Command{Argv: []string{"sh", "-c", "kill -9 $PPID; sleep 5"}}, nil)
	if !errors.Is(err, ErrGone) || !errors.Is(err, ErrStarted) {
		t.Fatalf("killing the agent: %v, want ErrGone with ErrStarted", err)
	}
	if c.Alive() {
		t.Fatal("the connection still serves after its agent was killed")
	}
	next, _ := agentPid(t, connect())
	if next == first {
		t.Fatalf("the same agent (pid %d) serves after it was killed", next)
	}
}

// TestKeeperReplacesAStoppedAgent: an agent that stops reading (code in the sandbox can stop
// it) is killed once a frame has waited keepWriteTimeout for it, and replaced; the node hears
// Gone before its own write timeout gives up on the connection.
func TestKeeperReplacesAStoppedAgent(t *testing.T) {
	connect := startKeeper(t)
	c := connect()
	first, _ := agentPid(t, c)
	if err := syscall.Kill(first, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// A command with more input than a pipe holds: the keeper's write to the stopped agent
	// waits, until keepWriteTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout+5*time.Second)
	defer cancel()
	started := time.Now()
	_, err := c.Run(ctx, Command{Argv: []string{"cat"}, Stdin: true}, strings.NewReader(strings.Repeat("y", 1<<20)), io.Discard, io.Discard)
	if !errors.Is(err, ErrGone) {
		t.Fatalf("a command to a stopped agent: %v, want ErrGone", err)
	}
	if took := time.Since(started); took >= writeTimeout {
		t.Fatalf("the connection was given up by the node's write timeout (%s), not by the keeper's", took)
	}
	if next, _ := agentPid(t, connect()); next == first {
		t.Fatalf("the stopped agent (pid %d) still serves", next)
	}
}

// TestKeeperEndsOnAStreamOutOfStep: input that is no frame (what reading the node's stream from
// under the keeper leaves) ends the keeper and its agent, and so the sandbox, instead of
// framing commands from a stream out of step.
func TestKeeperEndsOnAStreamOutOfStep(t *testing.T) {
	connect, cmd, in := startKeeperProc(t)
	agent, _ := agentPid(t, connect())
	if _, err := in.Write([]byte{'Z', 0, 0, 0, 1, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper still runs after input that is no frame")
	}
	wait.For(t, 10*time.Second, "the keeper's agent to end with the keeper", func() bool { return syscall.Kill(agent, 0) != nil })
}

// TestKeeperRefusesAForgedGone: a command that writes a keeper's Gone into its agent's output
// (the agent's files under /proc are the sandbox user's) does not get it relayed to the node as
// the keeper's word while that agent runs on: the keeper ends that agent, whose stream is no
// longer the node's to trust, and the next connection is served by a new one.
func TestKeeperRefusesAForgedGone(t *testing.T) {
	connect := startKeeper(t)
	c := connect()
	first, _ := agentPid(t, c)
	_, _, _, err := run(t, c, Command{Argv: []string{"sh", "-c", `printf 'G\0\0\0\0\0\0\0\0' > /proc/$PPID/fd/1; sleep 5`}}, nil)
	if !errors.Is(err, ErrGone) {
		t.Fatalf("a command that forged Gone: %v, want ErrGone", err)
	}
	if next, _ := agentPid(t, connect()); next == first {
		t.Fatalf("the agent whose output carried a forged Gone (pid %d) still serves", next)
	}
}
