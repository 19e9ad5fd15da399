package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestBackgroundProcesses: a process started in the background outlives the call that started
// it, is waited for, read from an offset and signalled, and ends with the lease.
func TestBackgroundProcesses(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		t.Run("a background process outlives its call, is read from an offset, signalled, and ends with the lease", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			out, errs, code := n.cli(t, "proc", "start", a.ID, "--", "sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 0.2; done; echo bye >&2; exit 4")
			pid := strings.TrimSpace(out)
			if code != 0 || !strings.HasPrefix(pid, "p-") {
				t.Fatalf("proc start: exit %d %q %s", code, out, errs)
			}
			// The call that started it has ended; another one waits for it and gets its code.
			if _, _, code := n.cli(t, "proc", "wait", a.ID, pid, "--timeout", "30s"); code != 4 {
				t.Errorf("proc wait: exit %d, want the process's 4", code)
			}
			if out, errs, _ := n.cli(t, "proc", "output", a.ID, pid); out != "tick 1\ntick 2\ntick 3\n" || errs != "bye\n" {
				t.Errorf("proc output: %q / %q", out, errs)
			}
			cl := n.goClient()
			ctx := context.Background()
			o, err := cl.ProcessOutput(ctx, a.ID, pid, client.OutputQuery{StdoutOffset: 7})
			if err != nil || o.Stdout != "tick 2\ntick 3\n" || o.StdoutOffset != 21 {
				t.Errorf("from offset 7: %+v %v", o, err)
			}
			// A long one, and what it starts, end on TERM.
			long, err := cl.StartProcess(ctx, a.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "sleep 300 & sleep 301; echo never"}})
			if err != nil {
				t.Fatal(err)
			}
			if ps, _, _ := n.cli(t, "proc", "ls", a.ID); !strings.Contains(ps, long.ID) || !strings.Contains(ps, "running") {
				t.Errorf("proc ls:\n%s", ps)
			}
			if _, errs, code := n.cli(t, "proc", "kill", a.ID, long.ID); code != 0 {
				t.Fatalf("proc kill: %s", errs)
			}
			w, err := cl.WaitProcess(ctx, a.ID, long.ID, 30*time.Second)
			if err != nil || w.Running {
				t.Fatalf("after TERM: %+v %v", w, err)
			}
			if out, _, _ := n.exec(t, a.ID, "sh", "-c", `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done 2>/dev/null | grep -c '^sleep 30[01]' || true`); strings.TrimSpace(out) != "0" {
				t.Errorf("what the process started outlived TERM: %s", out)
			}
			// The release ends what still runs.
			if _, err := cl.StartProcess(ctx, a.ID, api.ExecRequest{Cmd: []string{"sleep", "600"}}); err != nil {
				t.Fatal(err)
			}
			n.cli(t, "release", a.ID)
			if _, err := cl.Processes(ctx, a.ID); err == nil {
				t.Error("the released lease still lists processes")
			}
			want := []string{"exec/process-start", "exec/process-exit", "exec/process-signal"}
			kinds := n.logKinds(t, a.ID, want...)
			for _, k := range want {
				if !kinds[k] {
					t.Errorf("logs --lease lacks a %s record (have %v)", k, kinds)
				}
			}
		})
	})
}
