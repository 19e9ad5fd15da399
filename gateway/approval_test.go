package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/scope"
)

type heldAnswer struct {
	status int
	rule   string
	body   string
}

// post sends a request that may be held, returning what the sandbox finally saw.
func heldPost(h *harness, path string) heldAnswer {
	resp, err := h.client().Post("https://api.example.test"+path, "text/plain", strings.NewReader("deploy"))
	if err != nil {
		return heldAnswer{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return heldAnswer{resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), string(b)}
}

func pendingOne(t *testing.T, ap *approval.Registry, waiting int) approval.Approval {
	t.Helper()
	var got []approval.Approval
	if err := wait.Until(10*time.Second, "the approval to be pending with its waiting requests", func() bool {
		got = ap.List(func(string) bool { return true })
		return len(got) == 1 && got[0].Waiting == waiting
	}); err != nil {
		t.Fatalf("%v: %+v", err, got)
	}
	return got[0]
}

// A scope that asks approval holds its requests for a reviewer: one approval however many times
// the request is retried; approved once it lets the waiting request through, for the lease every
// identical one after; unanswered the sandbox is told it is pending (not denied); denied it is
// refused with the reviewer's reason; a new process (a restart) has no approvals or grants.
func TestApprovalRoundTrip(t *testing.T) {
	h := newHarness(t)
	h.scopes = []scope.Scope{{Host: "api.example.test", Approval: scope.Approval{On: true, Methods: []string{"POST"}}}}
	ap := approval.New(approval.Config{Hold: 2 * time.Second, Audit: h.sink, Node: "n"})
	h.proxyHandler().cfg.Approvals = ap

	if resp, err := h.client().Get("https://api.example.test/echo"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a GET the approval does not cover: %v %v", err, resp)
	}

	// Two of the same request wait on one approval; approved once, both go on.
	var wg sync.WaitGroup
	answers := make([]heldAnswer, 2)
	for i := range answers {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = heldPost(h, "/deploy") }()
	}
	a := pendingOne(t, ap, 2)
	if a.Method != "POST" || a.Path != "/deploy" || a.Lease != "l-1" {
		t.Fatalf("approval %+v", a)
	}
	if _, err := ap.Answer(a.ID, "secops", true, false, ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, got := range answers {
		if got.status != http.StatusOK {
			t.Fatalf("after approval: %+v", got)
		}
	}
	if _, err := ap.Answer(a.ID, "secops", true, false, ""); err == nil {
		t.Error("an approval was answered twice")
	}

	// Unanswered: pending, with its id; the retry joins it; denied, the retry is refused.
	first := heldPost(h, "/deploy")
	var pending struct {
		Error      string `json:"error"`
		ApprovalID string `json:"approval_id"`
		RetryAfter int    `json:"retry_after"`
	}
	if first.status != http.StatusForbidden || first.rule != "approval-pending" || json.Unmarshal([]byte(first.body), &pending) != nil ||
		pending.Error != "approval_pending" || pending.ApprovalID == "" || pending.RetryAfter == 0 {
		t.Fatalf("an unanswered request: %+v", first)
	}
	done := make(chan heldAnswer, 1)
	go func() { done <- heldPost(h, "/deploy") }()
	if again := pendingOne(t, ap, 1); again.ID != pending.ApprovalID {
		t.Fatalf("a retry made approval %s, not joined %s", again.ID, pending.ApprovalID)
	}
	ap.Answer(pending.ApprovalID, "secops", false, false, "not during the freeze")
	if got := <-done; got.status != http.StatusForbidden || got.rule != "approval-denied" || !strings.Contains(got.body, "not during the freeze") {
		t.Fatalf("a denied request: %+v", got)
	}

	// Approved for the lease: the next identical request goes on at once.
	go func() { done <- heldPost(h, "/deploy") }()
	a = pendingOne(t, ap, 1)
	ap.Answer(a.ID, "secops", true, true, "")
	if got := <-done; got.status != http.StatusOK {
		t.Fatalf("approved for the lease: %+v", got)
	}
	start := time.Now()
	if got := heldPost(h, "/deploy"); got.status != http.StatusOK || time.Since(start) > time.Second || len(ap.List(func(string) bool { return true })) != 0 {
		t.Fatalf("an identical request after a lease grant: %+v", got)
	}
	if got := heldPost(h, "/deploy/other"); got.status != http.StatusForbidden || got.rule != "approval-pending" {
		t.Fatalf("another request after a lease grant: %+v", got)
	}

	// The method in lower case is held too (the scope allows every method; an upstream may
	// read it as POST).
	req, _ := http.NewRequest("post", "https://api.example.test/deploy/lower", strings.NewReader("x"))
	if resp, err := h.client().Do(req); err != nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Rule") != "approval-pending" {
		t.Fatalf("a lower-case post: %v %v", err, resp)
	}

	// A restart: nothing pending, nothing granted; the request waits again.
	h.proxyHandler().cfg.Approvals = approval.New(approval.Config{Hold: 100 * time.Millisecond, Audit: h.sink})
	if got := heldPost(h, "/deploy"); got.status != http.StatusForbidden || got.rule != "approval-pending" {
		t.Fatalf("after a restart: %+v", got)
	}

	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	steps := map[audit.Event]int{}
	for _, r := range h.sink.recs {
		if strings.HasPrefix(string(r.Event), "approval-") {
			steps[r.Event]++
			if r.Event != "approval-request" && r.Reviewer != "secops" {
				t.Errorf("step %s without the reviewer: %+v", r.Event, r)
			}
		}
	}
	if steps["approval-request"] < 4 || steps["approval-grant"] != 2 || steps["approval-deny"] != 1 {
		t.Errorf("approval steps recorded: %v", steps)
	}
}
