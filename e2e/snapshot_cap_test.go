package e2e

import (
	"context"
	"strings"
	"testing"
)

// TestSnapshotOverCap: a snapshot over its template's cap (snapcap's snapshot.max_mb: 1) is
// refused 413 too_large, with the numbers and the setting that sets the cap, and the lease
// runs on with its workspace.
func TestSnapshotOverCap(t *testing.T) {
	n := sharedNode(t)
	a := n.leaseWith(t, "--template", "snapcap", "--allow", "api.example.test")
	if _, errs, code := n.exec(t, a.ID, "sh", "-c", "head -c 2097152 /dev/urandom > /workspace/big"); code != 0 {
		t.Fatal(errs)
	}
	_, err := n.goClient().Snapshot(context.Background(), a.ID, "", nil)
	e := apiError(t, err, 413, "too_large")
	if !strings.Contains(e.Message, "1048576") && !strings.Contains(e.Message, "1 MiB") || !strings.Contains(e.Message, "snapcap") {
		t.Errorf("the refusal does not give the cap and where it is set: %s", e.Message)
	}
	if out, _, code := n.exec(t, a.ID, "stat", "-c", "%s", "/workspace/big"); code != 0 || out != "2097152\n" {
		t.Errorf("after the refusal the lease's workspace: exit %d %q", code, out)
	}
}
