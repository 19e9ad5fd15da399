package e2e

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestStateBenchRuns: `make bench-state`'s harness still runs against the real engine, under
// runc and runsc, at its smallest: one round of a 1 MiB snapshot, its restore, a pause and a
// resume, a fork into two leases, and the stages timed alone, each restored workspace checked
// against its source by the harness itself.
func TestStateBenchRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "run", "../bench/statebench", "-sizes", "1", "-rounds", "1", "-pause-sizes", "1",
		"-fork", "2", "-fork-sizes", "1", "-fork-rounds", "1", "-vault", "../bin/vault").CombinedOutput()
	if err != nil {
		t.Fatalf("statebench: %v\n%s", err, out)
	}
	for _, rt := range []string{"runc", "runsc"} {
		for _, want := range []string{
			`\| ` + rt + ` \| 1 \| 3 \| 1\.01 \| `,             // the snapshot: the workspace, data/ and one file
			`\| ` + rt + ` \| 1 \|( [^|]+ \|){6} [01] of 1 \|`, // the restore
			`\| ` + rt + ` \| 1 \| (files|memory\+files) \| `,  // the pause says what it kept
			`\| ` + rt + ` \| 1 \| 1 x 2 \| `,                  // the fork
			`Under ` + rt + `, each stage`,
		} {
			if !regexp.MustCompile(want).Match(out) {
				t.Errorf("statebench printed nothing matching %s:\n%s", want, out)
			}
		}
	}
	if !strings.Contains(string(out), "| Vault transit: an unwrap") {
		t.Errorf("statebench timed no Vault transit call:\n%s", out)
	}
}
