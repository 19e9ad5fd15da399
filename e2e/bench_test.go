package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPoolBenchRuns: `make bench-pool`'s harness still runs against the real engine, under runc
// and runsc, cold starts and a whole node alike (a change to what a sandbox mounts once broke
// its cold starts without any test noticing).
func TestPoolBenchRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "run", "../bench/poolbench", "-n", "5", "-cold", "1", "-images", "airlock/default:latest",
		"-node", "-rounds", "1", "-warm", "2", "-requests", "2", "-vault", "../bin/vault").CombinedOutput()
	if err != nil {
		t.Fatalf("poolbench: %v\n%s", err, out)
	}
	for _, want := range []string{"under runc: cold start", "under runsc: cold start", "| 1 | 5 |",
		"| runc | 10 | 2 |", "| runsc | 10 | 2 |", "| runsc | kept alive |", "| warm lease p99 @10 |", "| gateway added p50 (fresh) |", "| MCP run tool"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("poolbench printed no %q:\n%s", want, out)
		}
	}
}
