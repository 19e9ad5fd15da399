package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPoolBenchRuns: `make bench-pool`'s harness still runs against the real engine, under runc
// and runsc (a change to what a sandbox mounts once broke its cold starts without any test
// noticing).
func TestPoolBenchRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "run", "../bench/poolbench", "-n", "5", "-cold", "1", "-images", "airlock/default:latest").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "under runc: cold start") || !strings.Contains(string(out), "under runsc: cold start") ||
		!strings.Contains(string(out), "| 1 | 5 |") {
		t.Fatalf("poolbench: %v\n%s", err, out)
	}
}
