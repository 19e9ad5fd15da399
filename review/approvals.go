package review

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/airlock-dev/airlock/approval"
)

type approvalsData struct {
	page
	Approvals []approval.Approval
	On        bool
}

// approvals lists the requests held for a reviewer that the session may answer.
func (s *Server) approvals(w http.ResponseWriter, r *http.Request) {
	p, ok := s.view(w, r, "Approvals", "approvals")
	if !ok {
		return
	}
	d := approvalsData{page: p, On: s.cfg.Approvals != nil}
	if d.On {
		d.Approvals = s.cfg.Approvals.List(sessionOf(r).sees)
	}
	s.render(w, "approvals.html", d)
}

// answer approves (once or for the lease) or denies a held request in the session's name; the
// key that leased may not approve its own request.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	sess := sessionOf(r)
	if s.cfg.Approvals == nil {
		s.fail(w, r, http.StatusNotFound, "this node holds no approvals")
		return
	}
	if !s.acts.Allow(sess.CSRF) {
		s.fail(w, r, http.StatusTooManyRequests, "too many answers from this session; wait a second")
		return
	}
	ap, ok := s.cfg.Approvals.Get(r.PathValue("id"))
	if !ok || !sess.sees(ap.Tenant) {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("no approval %q is pending for this session", r.PathValue("id")))
		return
	}
	decision, reason := r.PostFormValue("decision"), strings.TrimSpace(r.PostFormValue("reason"))
	approve, forLease := false, false
	switch decision {
	case "approve-once":
		approve = true
	case "approve-lease":
		approve, forLease = true, true
	case "deny":
		if reason == "" {
			s.fail(w, r, http.StatusBadRequest, "a denial needs a reason (the sandbox is told it)")
			return
		}
	default:
		s.fail(w, r, http.StatusBadRequest, "decision is approve-once, approve-lease or deny")
		return
	}
	if approve && !s.cfg.AllowSelfApproval {
		if s.cfg.LeaseKey == nil {
			s.fail(w, r, http.StatusConflict, "who leased the sandbox cannot be known here, so its requests cannot be approved")
			return
		}
		key, err := s.cfg.LeaseKey(r.Context(), ap.Tenant, ap.Lease)
		if err != nil {
			s.fail(w, r, http.StatusConflict, fmt.Sprintf("lease %s cannot be read, so who leased it is unknown: %v", ap.Lease, err))
			return
		}
		if key != "" && key == sess.keyHash {
			s.fail(w, r, http.StatusForbidden, "the key that leased the sandbox cannot approve its own request")
			return
		}
	}
	if _, err := s.cfg.Approvals.Answer(ap.ID, sess.Who, approve, forLease, reason); err != nil {
		s.fail(w, r, http.StatusNotFound, err.Error())
		return
	}
	http.Redirect(w, r, "/approvals", http.StatusSeeOther)
}
