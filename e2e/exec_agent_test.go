package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestExecAgent: under each runtime, a lease's commands run under the sandbox's exec agent (their
// parent is the agent, not the engine), with the sandbox's user, environment and exit codes; a
// sandbox that kills its own agent still runs every command (by engine exec meanwhile), and
// gets its agent back.
func TestExecAgent(t *testing.T) {
	n := sharedNode(t)
	for _, template := range []string{"default", "gvisor"} {
		t.Run(template, func(t *testing.T) {
			a := n.leaseWith(t, "--template", template)
			parent := `cat /proc/$PPID/comm 2>/dev/null || echo "an engine exec (parent $PPID)"`
			out, errs, code := n.exec(t, a.ID, "sh", "-c", parent+`; id -u; echo "$HTTPS_PROXY" | grep -c 3128; exit 7`)
			if code != 7 || out != ".airlock-agent\n10001\n1\n" {
				t.Fatalf("a command: exit %d (want 7), %q (want the agent as parent, uid 10001, the proxy set), %s", code, out, errs)
			}
			// The command that kills it is told its agent stopped under it (it may have run).
			if out, errs, code := n.exec(t, a.ID, "sh", "-c", `kill -9 $PPID; sleep 5`); code == 0 || !strings.Contains(errs, "exec agent stopped") {
				t.Fatalf("killing the agent from inside: exit %d %q %s", code, out, errs)
			}
			// Meanwhile every command still runs, and soon again under an agent.
			eventually(t, 30*time.Second, "the sandbox's agent to be started again", func() bool {
				out, _, code := n.exec(t, a.ID, "sh", "-c", parent)
				if code != 0 {
					t.Fatalf("a command after the agent was killed: exit %d %q", code, out)
				}
				return out == ".airlock-agent\n"
			})
		})
	}
}
