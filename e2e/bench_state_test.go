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
// resume (under runsc also on a template with snapshot.memory), a fork into two leases, and the
// stages timed alone, each restored workspace checked against its source by the harness itself.
// A pause that keeps files brings back no process; one that keeps memory brings back the one
// started before it, unless the engine cannot checkpoint, which the pause must say.
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
			`\| ` + rt + ` \| no \| 1 \| files \| 0 of 1 \| `,  // the pause keeps files: the process is gone
			`\| ` + rt + ` \| 1 \| 1 x 2 \| `,                  // the fork
			`Under ` + rt + `, each stage`,
		} {
			if !regexp.MustCompile(want).Match(out) {
				t.Errorf("statebench printed nothing matching %s:\n%s", want, out)
			}
		}
	}
	memory := `\| runsc \| yes \| 1 \| memory\+files \| 1 of 1 \| ` // the process is back after the resume
	if strings.Contains(string(out), "without experimental mode") {
		memory = `\| runsc \| yes \| 1 \| files \| 0 of 1 \| `
	}
	if !regexp.MustCompile(memory).Match(out) {
		t.Errorf("statebench printed nothing matching %s:\n%s", memory, out)
	}
	if !strings.Contains(string(out), "| Vault transit: an unwrap") {
		t.Errorf("statebench timed no Vault transit call:\n%s", out)
	}
}
