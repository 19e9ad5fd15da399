package api_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/slots"
)

// The attack the review found: 20 calls of one tenant that are not streams (a process's stdin,
// /v1/explain), each sending one byte of a thousand. The tenant's two call slots hold two of
// them and the rest are refused, naming api.calls.per_identity; while those hang, another
// tenant and a reviewer key are served; they are cut off after api.timeouts.body, with 408
// naming it, every connection is closed, and the tenant is served again.
func TestSlowBodiesBoundedPerTenant(t *testing.T) {
	// The two slow bodies let in hold their slots until api.timeouts.body cuts them: long enough
	// for the checks below to see them held on a loaded machine (2 s was not, under -race in CI).
	e := newBoundEnv(t, bounds{timeouts: slots.Timeouts{Header: 5 * time.Second, Body: 8 * time.Second, Stall: 10 * time.Second, Idle: 10 * time.Second}})
	stdin := "/v1/leases/" + e.leases["acme"] + "/processes/p-1/stdin"
	var conns []net.Conn
	for i := range 20 {
		conns = append(conns, e.open("127.0.0.1", false, "key-acme", "POST", []string{stdin, "/v1/explain"}[i%2], 1000, "{"))
	}
	e.waitHeld("acme's slow bodies to hold its two call slots", false, "tenant:acme", 2)
	e.refused("127.0.0.2", "key-acme", "GET", "/v1/leases", "", "too_many_calls",
		"tenant acme already holds 2 calls in progress on this node, the most one tenant may, all its keys together (api.calls.per_identity)")
	e.served("127.0.0.3", "key-globex", "GET", "/v1/leases", "", http.StatusOK)
	e.served("127.0.0.4", "key-secops", "GET", "/v1/approvals", "", http.StatusOK)
	refused, cut := 0, 0
	for _, c := range conns {
		st, out := e.answer(c)
		er, _ := out["error"].(map[string]any)
		switch {
		case refusal(st, out, "too_many_calls", "(api.calls.per_identity)") == nil:
			refused++
		case st == http.StatusRequestTimeout && er["code"] == "body_timeout" &&
			strings.Contains(fmt.Sprint(er["message"]), "the request body did not come whole within 8s (api.timeouts.body)"):
			cut++
		default:
			t.Errorf("a slow body: %d %v; want 429 too_many_calls or 408 body_timeout", st, out)
		}
		e.closed(c, "a slow body's connection")
	}
	if refused != 18 || cut != 2 {
		t.Errorf("%d slow bodies refused and %d cut off after api.timeouts.body; want 18 and the 2 the bound let in", refused, cut)
	}
	e.served("127.0.0.2", "key-acme", "GET", "/v1/leases", "", http.StatusOK)
}

// Tenants' slow calls together cannot take the call slots kept for reviewer keys: past their
// share a tenant is refused, naming api.calls.reviewers, and a reviewer key still answers
// approvals.
func TestCallsKeptForReviewerKeys(t *testing.T) {
	// The slow bodies must hold their slots through the checks, however loaded the machine: the
	// body timeout is far past them (5 s was not, once, under -race).
	e := newBoundEnv(t, bounds{calls: slots.Limits{Max: 6, PerIdentity: 2, Reserved: 2},
		timeouts: slots.Timeouts{Header: 5 * time.Second, Body: time.Minute, Stall: time.Minute, Idle: time.Minute}})
	for _, tenant := range []string{"acme", "acme", "globex", "globex"} {
		e.open("127.0.0.1", false, "key-"+tenant, "POST", "/v1/explain", 1000, "{")
	}
	e.waitHeld("acme's slow bodies to hold its two call slots", false, "tenant:acme", 2)
	e.waitHeld("globex's slow bodies to hold its two call slots", false, "tenant:globex", 2)
	e.refused("127.0.0.2", "key-initech", "GET", "/v1/leases", "", "too_many_calls",
		"the 4 calls in progress this node serves to tenants' keys are all taken; the other 2 of api.calls.max (6) are kept for reviewer keys (api.calls.reviewers)")
	e.served("127.0.0.3", "key-secops", "GET", "/v1/approvals", "", http.StatusOK)
	e.served("127.0.0.3", "key-secops", "POST", "/v1/approvals/ap-none", `{"decision": "deny", "reason": "r"}`, http.StatusNotFound)
}
