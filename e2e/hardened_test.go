package e2e

import (
	"strings"
	"testing"
)

// TestSandboxHardened checks the floor every sandbox starts from: no setuid or setgid files, a
// numeric user that is not root, and limits on open files and processes.
func TestSandboxHardened(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		a := n.lease(t, "api.example.test")
		if out, errs, code := n.exec(t, a.ID, "sh", "-c", "find / -xdev -type f \\( -perm -4000 -o -perm -2000 \\) 2>/dev/null"); strings.TrimSpace(out) != "" {
			t.Errorf("setuid or setgid files in the sandbox (exit %d, %s):\n%s", code, errs, out)
		}
		out, errs, code := n.exec(t, a.ID, "bash", "-c", "echo $(id -u):$(id -g) $(ulimit -n) $(ulimit -u)")
		if code != 0 {
			t.Fatalf("probe: exit %d: %s", code, errs)
		}
		if got := strings.TrimSpace(out); got != "10001:10001 4096 4096" {
			t.Errorf("uid:gid nofile nproc = %q, want \"10001:10001 4096 4096\"", got)
		}
	})
}
