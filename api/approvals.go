package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/airlock-dev/airlock/approval"
)

// Reviewer is a reviewer key's identity (approval.Reviewer).
type Reviewer = approval.Reviewer

// approverID is who answers an approval: a reviewer key, or a tenant's API key.
type approverID struct {
	name    string // the reviewer's name, or "tenant:T"
	keyHash string
	tenants []string
	all     bool
}

func (a approverID) sees(tenant string) bool { return a.all || slices.Contains(a.tenants, tenant) }

// approver admits a reviewer key or an API key, rate-limited per key like every call, and
// holds a call slot of its tenant or reviewer key while h serves the call as who.
func (s *Server) approver(h func(w http.ResponseWriter, r *http.Request, who approverID)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Approvals == nil {
			writeError(w, http.StatusNotFound, "not_found", "this node holds no approvals")
			return
		}
		hash := bearer(r)
		var who approverID
		var holder caller
		if t, known := s.cfg.Keys[hash]; hash != "" && known {
			who, holder = approverID{name: "tenant:" + t, keyHash: hash, tenants: []string{t}}, caller{tenant: t}
		} else if rv, known := s.cfg.Reviewers[hash]; hash != "" && known {
			who, holder = approverID{name: rv.Name, keyHash: hash, tenants: rv.Tenants, all: rv.Everyone()}, caller{reviewer: rv.Name}
		} else {
			writeError(w, http.StatusUnauthorized, "unauthorized", "an API key or a reviewer key is required as 'Authorization: Bearer KEY'")
			return
		}
		if !s.admitRate(w, hash) {
			return
		}
		release, ok := s.hold(w, r, call, holder)
		if !ok {
			return
		}
		defer release()
		h(w, r, who)
	}
}

// listApprovals lists the pending approvals of the caller's tenants.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, who approverID) {
	writeJSON(w, http.StatusOK, s.cfg.Approvals.List(who.sees))
}

// answerApproval answers one approval, as approval.Check allows: only a caller who may see its
// tenant, and not the key that leased (a sandbox's own agent approving its own request would
// make the approval a formality).
func (s *Server) answerApproval(w http.ResponseWriter, r *http.Request, who approverID) {
	var req AnswerRequest
	if !readJSON(w, r, &req) {
		return
	}
	approve := false
	switch {
	case req.Decision == "approve" && (req.For == "" || req.For == "once" || req.For == "lease"):
		approve = true
	case req.Decision == "deny":
	default:
		writeError(w, http.StatusBadRequest, "bad_request", `decision is "approve" (for "once" or "lease") or "deny" with a reason`)
		return
	}
	ap, err := s.cfg.Approvals.Check(r.Context(), r.PathValue("id"),
		approval.Answerer{Name: who.name, KeyHash: who.keyHash, Sees: who.sees}, approve, req.Reason)
	if err == nil {
		ap, err = s.cfg.Approvals.Answer(ap.ID, who.name, approve, req.For == "lease", req.Reason)
	}
	switch {
	case errors.Is(err, approval.ErrNoApproval):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no approval %s is pending on this node for this key", r.PathValue("id")))
		return
	case errors.Is(err, approval.ErrSelfApproval):
		writeError(w, http.StatusForbidden, "self_approval", err.Error())
		return
	case errors.Is(err, approval.ErrNeedReason):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	case err != nil:
		writeError(w, http.StatusConflict, "lease_unknown", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, ap)
}
