package docker

import (
	"io"
	"testing"

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
