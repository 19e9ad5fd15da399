package review

import (
	"errors"
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

// answer approves (once or for the lease) or denies a held request in the session's name, as
// approval.Check allows (never by the key that leased).
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
	decision, reason := r.PostFormValue("decision"), strings.TrimSpace(r.PostFormValue("reason"))
	approve, forLease := false, false
	switch decision {
	case "approve-once":
		approve = true
	case "approve-lease":
		approve, forLease = true, true
	case "deny":
	default:
		s.fail(w, r, http.StatusBadRequest, "decision is approve-once, approve-lease or deny")
		return
	}
	ap, err := s.cfg.Approvals.Check(r.Context(), r.PathValue("id"), approval.Answerer{Name: sess.Who, KeyHash: sess.keyHash, Sees: sess.sees},
		approve, reason)
	if err == nil {
		_, err = s.cfg.Approvals.Answer(ap.ID, sess.Who, approve, forLease, reason)
	}
	switch {
	case errors.Is(err, approval.ErrNoApproval):
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("no approval %q is pending for this session", r.PathValue("id")))
		return
	case errors.Is(err, approval.ErrSelfApproval):
		s.fail(w, r, http.StatusForbidden, err.Error())
		return
	case errors.Is(err, approval.ErrNeedReason):
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		s.fail(w, r, http.StatusConflict, err.Error())
		return
	}
	http.Redirect(w, r, "/approvals", http.StatusSeeOther)
}
