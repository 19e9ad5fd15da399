package inside

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// AliveCmd finds a process by the marker in its environment, and not once it is gone; a marker
// no process carries is not printed.
func TestAliveCmdFindsMarkedProcesses(t *testing.T) {
	const marked, other = "0123456789abcdef", "fedcba9876543210"
	p := exec.Command("sleep", "600")
	p.Env = append(os.Environ(), Marker+"="+marked)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	alive := func() string {
		t.Helper()
		cmd := AliveCmd([]string{marked, other})
		out, err := exec.Command(cmd[0], cmd[1:]...).Output()
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := alive(); got != marked {
		t.Fatalf("with the marked process running: %q, want %q", got, marked)
	}
	p.Process.Kill()
	p.Wait()
	if got := alive(); got != "" {
		t.Fatalf("with the marked process gone: %q, want nothing", got)
	}
}
