package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/rule"
)

// approve holds a request its scope asks approval for until a reviewer answers (package
// approval). It comes after every other local refusal, so no reviewer is asked about a request
// that would be refused anyway. It waits until ctx ends at most: the request's hold's context,
// which a cut ends.
func (p *Proxy) approve(ctx context.Context, r *http.Request, x *exchange) error {
	if !x.scope.Approval.Holds(r.Method, x.path) {
		return nil
	}
	if p.cfg.Approvals == nil {
		return refuse(http.StatusForbidden, rule.ApprovalDenied,
			fmt.Sprintf("scope %s asks approval for %s %s, and this gateway takes no approvals", x.scope, r.Method, x.path), "")
	}
	o := p.cfg.Approvals.Wait(ctx, approval.Request{Lease: x.b.Lease, Tenant: x.b.Tenant, Task: x.b.Task, Method: x.method,
		Host: x.host, Port: x.port, Path: x.path, Query: r.URL.RawQuery, Scope: x.scope.String(), LeaseEnd: x.b.Expires})
	switch {
	case o.Approved && o.ForLease:
		x.note = "approved for the lease by " + o.Reviewer
		return nil
	case o.Approved:
		x.note = "approved once by " + o.Reviewer
		return nil
	case o.Denied:
		return refuse(http.StatusForbidden, rule.ApprovalDenied,
			fmt.Sprintf("reviewer %s denied approval %s: %s", o.Reviewer, o.Pending.ID, o.Reason), "")
	}
	return pendingRefusal(o.Pending)
}

// pendingRefusal tells the sandbox its request waits for a reviewer, distinct from a denial: 403
// with a JSON body naming the approval and when to retry (a retry joins the same approval), its
// message the same text as the X-Airlock-Reason header.
func pendingRefusal(ap approval.Approval) *Refusal {
	const retry = 10
	reason := fmt.Sprintf("approval %s is pending: a reviewer must approve %s %s:%d%s; retry after %d seconds",
		ap.ID, ap.Method, ap.Host, ap.Port, ap.Path, retry)
	ref := refuse(http.StatusForbidden, rule.ApprovalPending, reason, "airlock approve "+ap.ID)
	ref.respond = func(w http.ResponseWriter) {
		body, _ := json.Marshal(map[string]any{"error": "approval_pending", "approval_id": ap.ID, "retry_after": retry,
			"message": "airlock: " + reason})
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("Retry-After", strconv.Itoa(retry))
		w.WriteHeader(http.StatusForbidden)
		w.Write(append(body, '\n'))
	}
	return ref
}
