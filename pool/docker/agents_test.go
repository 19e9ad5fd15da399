package docker

import (
	"io"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pool/docker/agent"
)

// TestAgentOfADestroyedSandboxIsNotKept: a sandbox destroyed while its agent was starting does
// not keep the agent that starts after (it would be a connection to nothing, kept forever).
func TestAgentOfADestroyedSandboxIsNotKept(t *testing.T) {
	var a agents
	if !a.claim("sb") {
		t.Fatal("the first claim was refused")
	}
	if a.claim("sb") {
		t.Fatal("a second start was allowed while one is under way")
	}
	a.drop("sb")
	pr, _ := io.Pipe()
	closed := false
	a.started("sb", agent.NewConn(pr, io.Discard, func() { closed = true; pr.Close() }))
	if a.get("sb") != nil || !closed {
		t.Fatalf("the agent of a destroyed sandbox was kept (closed %v)", closed)
	}
	if !a.claim("sb2") {
		t.Fatal("another sandbox's claim was refused")
	}
	pr2, _ := io.Pipe()
	a.started("sb2", agent.NewConn(pr2, io.Discard, func() { pr2.Close() }))
	if a.get("sb2") == nil {
		t.Fatal("a started agent was not kept")
	}
}

// TestFailedAgentStartWaits: a sandbox whose agent would not start is not tried again at every
// command (each try is an engine exec), but after retryAfter; a good start clears that.
func TestFailedAgentStartWaits(t *testing.T) {
	var a agents
	if !a.claim("sb") {
		t.Fatal("the first claim was refused")
	}
	a.started("sb", nil) // it failed
	if a.claim("sb") {
		t.Fatal("a sandbox whose agent just failed to start is tried again at once")
	}
	a.mu.Lock()
	a.failed["sb"] = time.Now().Add(-retryAfter - time.Second)
	a.mu.Unlock()
	if !a.claim("sb") {
		t.Fatal("the agent is not tried again after retryAfter")
	}
	pr, _ := io.Pipe()
	a.started("sb", agent.NewConn(pr, io.Discard, func() { pr.Close() }))
	if a.get("sb") == nil || len(a.failed) != 0 {
		t.Fatal("a good start did not clear the failure")
	}
	a.drop("sb")
}

// TestKeptSandboxServesItsFirstCommand: under runc a sandbox's main process is the agent's
// keeper (PID 1), and its first command, right after Create, runs through the agent the keeper
// started (its parent), as the sandbox's user, not through an engine exec.
func TestKeptSandboxServesItsFirstCommand(t *testing.T) {
	r := testRuntime(t)
	sb := newSandbox(t, r, testTemplate("runc"))
	got := runIn(t, r, sb, "sh", "-c", `echo "$(cat /proc/$PPID/comm) $(id -u) $(awk '/^PPid/{print $2}' /proc/$PPID/status)"; tr '\0' ' ' </proc/1/cmdline`)
	if want := ".airlock-agent 10001 1\n" + agent.Path + " " + agent.KeepArg + " "; got != want {
		t.Fatalf("the first command's parent, user, the parent's parent, and PID 1:\n%q\nwant\n%q", got, want)
	}
}
