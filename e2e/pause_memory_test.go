package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/pool"
)

// TestPauseKeepsRunningProcesses: on a gVisor template whose pauses keep memory
// (snapshot.memory), a process a lease started goes on after a pause and a resume, twice, with
// what it held only in memory; the lease comes back in another sandbox, its commands run through
// the reattached agent, and its requests carry credentials minted after the resume. Where the
// engine cannot checkpoint (no experimental mode) the pause must say so, and only then is the
// test skipped.
func TestPauseKeepsRunningProcesses(t *testing.T) {
	n := sharedNode(t).under("gvisor-memory")
	ctx := context.Background()
	c := n.goClient()
	l := n.lease(t, "api.example.test=vault-task")
	// The number it drew and the count it keeps are in its memory only; the file shows them.
	loop := `n=$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); i=0; while :; do i=$((i+1)); echo "$$ $n $i" > /workspace/counter.tmp; mv /workspace/counter.tmp /workspace/counter; sleep 0.05; done`
	proc, err := c.StartProcess(ctx, l.ID, api.ExecRequest{Cmd: []string{"sh", "-c", loop}})
	if err != nil {
		t.Fatal(err)
	}
	before := readLoop(t, n, l.ID, 3)
	sandbox := l.Sandbox
	for round := 1; round <= 2; round++ {
		p, err := c.Pause(ctx, l.ID, true)
		if err != nil {
			t.Fatalf("pause %d: %v", round, err)
		}
		if p.Kept != apitype.KeptMemory {
			if strings.Contains(p.Why, "experimental") {
				t.Skipf("this engine cannot checkpoint, as the pause says: %s", p.Why)
			}
			t.Fatalf("pause %d of a lease of a template that keeps memory kept %s: %s", round, p.Kept, p.Why)
		}
		if p.Why != "" || p.TookMS <= 0 {
			t.Errorf("pause %d: %+v", round, p)
		}
		if !sandboxGone(sandbox) {
			t.Errorf("after pause %d the paused lease's container %.12s is still there", round, sandbox)
		}
		r, status, body := n.resumeAllow(t, l.ID, "api.example.test=vault-task")
		if status != 200 {
			t.Fatalf("resume %d: %d %s", round, status, body)
		}
		if r.Restored == nil || r.Restored.Kept != apitype.KeptMemory || r.Restored.Snapshot != p.Snapshot || r.Sandbox == sandbox {
			t.Fatalf("resume %d: sandbox %s (paused in %s), restored %+v", round, r.Sandbox, sandbox, r.Restored)
		}
		sandbox = r.Sandbox
		after := readLoop(t, n, l.ID, before.count)
		if after.pid != before.pid || after.drawn != before.drawn {
			t.Fatalf("after resume %d the loop is %+v; before the pause it was %+v: it did not come back, it started again", round, after, before)
		}
		before = after
		if out, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
			t.Fatalf("curl after resume %d: exit %d %s %s", round, code, out, errs)
		}
	}
	// The resumed lease lists the loop again, under its id, and a signal reaches it.
	ps, err := c.Processes(ctx, l.ID)
	if err != nil || len(ps) != 1 || ps[0].ID != proc.ID || !ps[0].Running || !ps[0].Resumed {
		t.Fatalf("the resumed lease's processes: %+v %v; want %s, running, resumed", ps, err, proc.ID)
	}
	if err := c.SignalProcess(ctx, l.ID, proc.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	// Its entry ends once the loop is found gone from the sandbox's processes.
	eventually(t, 30*time.Second, "the killed loop's entry to end", func() bool {
		ps, err := c.Processes(ctx, l.ID)
		return err == nil && len(ps) == 1 && !ps[0].Running
	})
	kinds := n.logKinds(t, l.ID, "lease/pause", "lease/resume")
	if !kinds["lease/pause"] || !kinds["lease/resume"] {
		t.Errorf("logs --lease lacks the pause or the resume: %v", kinds)
	}
	// Each pause's ledger read the workspace before the checkpoint stopped the sandbox.
	recs := n.trailUntil(t, l.ID, func(recs []audit.Record) bool {
		return len(slices.DeleteFunc(slices.Clone(recs), func(r audit.Record) bool { return r.Event != pool.EventWorkspace })) >= 2
	})
	for _, r := range recs {
		if r.Event == pool.EventWorkspace && strings.Contains(r.Reason, "could not be read") {
			t.Errorf("a pause's workspace record of sandbox %.12s: %s", r.Sandbox, r.Reason)
		}
	}
}

// loopState is what the loop of TestPauseKeepsRunningProcesses writes: its pid, the number it
// drew at its start and its count.
type loopState struct {
	pid, drawn string
	count      int
}

// readLoop waits until the loop in lease has counted past after, and returns what it wrote.
func readLoop(t *testing.T, n *shared, lease string, after int) loopState {
	t.Helper()
	var s loopState
	eventually(t, 30*time.Second, fmt.Sprintf("the loop in %s to count past %d", lease, after), func() bool {
		out, _, code := n.exec(t, lease, "cat", "/workspace/counter")
		if code != 0 {
			return false
		}
		var got loopState
		if k, _ := fmt.Sscan(out, &got.pid, &got.drawn, &got.count); k != 3 {
			return false
		}
		s = got
		return s.count > after
	})
	return s
}
