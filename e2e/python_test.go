package e2e

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestPythonClient runs the Python client's own tests (sdk/python/tests, pytest on Debian's
// python3) against the shared node.
func TestPythonClient(t *testing.T) {
	n := sharedNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Dir = "../sdk/python"
	cmd.Env = append(os.Environ(), "AIRLOCK_ADDR="+n.client.Addr, "AIRLOCK_TOKEN="+n.client.Token, "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest sdk/python/tests (scripts/deps.sh installs python3-pytest): %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
