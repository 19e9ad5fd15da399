package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
)

// cliAs runs the CLI against n's API with another key.
func (n *nodeProc) cliAs(t *testing.T, key string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_STATE_DIR="+n.state, "AIRLOCK_ADDR="+n.client.Addr, "AIRLOCK_TOKEN="+key)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// An approval's round trip as the sandbox sees it: a request a scope holds waits for a reviewer;
// unanswered it gets approval_pending (not a denial) with the approval's id; the retry joins the
// same approval; the key that leased cannot approve it; a reviewer's approval lets the waiting
// request through; a denial reaches the sandbox with its reason; every step is a record naming
// the reviewer.
func TestApprovalRoundTrip(t *testing.T) {
	dir := t.TempDir()
	const reviewerKey = "e2e-approver-key-0123456789"
	spec := nodeSpec{Name: "e2eapprove", Network: "airlock-e2eapprove", Bridge: "airlock-e2ea", Subnet: "10.223.0.0/24", MinWarm: 1,
		Gateway: "  approvals: {hold: 4s, ttl: 5m}\n",
		Extra:   fmt.Sprintf("review:\n  reviewers:\n    - {name: secops, sha256: %s, tenants: [\"*\"]}\n", sha256Hex(reviewerKey))}
	cfgPath, err := spec.write(dir, startUpstream(t))
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, spec, dir+"/state", cfgPath)
	tok := mintToken(t, "task-approve", []map[string]any{{"host": "api.example.test", "approval": map[string]any{"methods": []string{"POST"}}}}, time.Hour)
	l := n.leaseWith(t, "--token", tok)
	post := []string{"curl", "-sS", "-X", "POST", "--data", "release 1.2", "https://api.example.test/echo"}

	// Unanswered: the sandbox is told it is pending, with the approval's id.
	out, _, _ := n.exec(t, l.ID, post...)
	var pending struct {
		Error      string `json:"error"`
		ApprovalID string `json:"approval_id"`
		RetryAfter int    `json:"retry_after"`
		Message    string `json:"message"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(out)), &pending) != nil || pending.Error != "approval_pending" || pending.ApprovalID == "" {
		t.Fatalf("an unanswered request: %q", out)
	}
	t.Logf("the sandbox saw, unanswered: %s", strings.TrimSpace(out))

	// The retry waits on the same approval; the key that leased cannot approve it.
	result := make(chan string, 1)
	go func() { o, e, _ := n.exec(t, l.ID, post...); result <- o + e }()
	var listed []approval.Approval
	if err := waitUntil(30*time.Second, "the retry to wait on the approval", func() bool {
		o, _, _ := n.cliAs(t, reviewerKey, "approvals", "--json")
		return json.Unmarshal([]byte(o), &listed) == nil && len(listed) == 1 && listed[0].Waiting == 1
	}); err != nil {
		t.Fatalf("%v: %+v", err, listed)
	}
	if listed[0].ID != pending.ApprovalID || listed[0].Lease != l.ID || listed[0].Method != "POST" {
		t.Fatalf("the pending approval: %+v, want %s", listed[0], pending.ApprovalID)
	}
	if _, errs, code := n.cli(t, "approve", pending.ApprovalID); code == 0 || !strings.Contains(errs, "cannot approve its own request") {
		t.Errorf("the leasing key approved its own request: exit %d %s", code, errs)
	}
	if o, errs, code := n.cliAs(t, reviewerKey, "approve", pending.ApprovalID); code != 0 {
		t.Fatalf("the reviewer's approval: exit %d %s %s", code, o, errs)
	}
	select {
	case got := <-result:
		if !strings.Contains(got, "you sent:") {
			t.Fatalf("the approved request: %q", got)
		}
		t.Logf("the sandbox saw, once approved: %s", strings.TrimSpace(got))
	case <-time.After(30 * time.Second):
		t.Fatal("the approved request did not finish within 30s")
	}

	// A denial reaches the sandbox with the reviewer's reason.
	go func() { o, e, _ := n.exec(t, l.ID, post...); result <- o + e }()
	if err := waitUntil(30*time.Second, "a new approval", func() bool {
		o, _, _ := n.cliAs(t, reviewerKey, "approvals", "--json")
		return json.Unmarshal([]byte(o), &listed) == nil && len(listed) == 1 && listed[0].Waiting == 1
	}); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := n.cliAs(t, reviewerKey, "deny", listed[0].ID, "--reason", "not during the freeze"); code != 0 {
		t.Fatalf("deny: %s", errs)
	}
	if got := <-result; !strings.Contains(got, "approval-denied") || !strings.Contains(got, "not during the freeze") {
		t.Fatalf("the denied request: %q", got)
	}

	// A reviewer key answers approvals and nothing else: it cannot list, lease or run.
	for _, args := range [][]string{{"leases"}, {"exec", l.ID, "--", "true"}, {"lease", "--allow", "api.example.test"}} {
		if _, errs, code := n.cliAs(t, reviewerKey, args...); code == 0 || !strings.Contains(errs, "API key") {
			t.Errorf("a reviewer key ran airlock %v: exit %d %s", args, code, errs)
		}
	}

	steps := map[audit.Event]string{}
	n.trailUntil(t, l.ID, func(rs []audit.Record) bool {
		for _, r := range rs {
			if strings.HasPrefix(string(r.Event), "approval-") {
				steps[r.Event] = r.Reviewer
			}
		}
		return len(steps) == 3
	})
	if steps["approval-grant"] != "secops" || steps["approval-deny"] != "secops" {
		t.Errorf("approval steps and their reviewers: %v", steps)
	}
}
