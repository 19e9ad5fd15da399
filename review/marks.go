package review

import (
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/audit"
)

// EventReviewMark is the event of a review mark's record (kind audit): the trail is where marks
// are kept, so each is as signed and as lasting as what it marks.
const EventReviewMark = "review-mark"

// maxNote bounds a mark's note.
const maxNote = 2000

// mark is the latest review mark of a lease or a destination.
type mark struct {
	Who  string
	Note string
	Time time.Time
	Seq  uint64
}

// marks returns the latest mark of each lease ("lease:ID") and destination ("host:NAME") the
// tenant's records hold (every tenant's for "").
func (s *Server) marks(r *http.Request, tenant string) map[string]*mark {
	out := map[string]*mark{}
	s.cfg.Trail.Query(r.Context(), audit.Query{Kind: string(audit.KindAudit), Event: EventReviewMark, Tenant: tenant},
		func(rec audit.Record) error {
			m := &mark{Who: rec.Reviewer, Note: rec.Reason, Time: rec.Time, Seq: rec.Seq}
			if rec.Lease != "" {
				out["lease:"+rec.Lease] = m
			} else if rec.Host != "" {
				out["host:"+rec.Host] = m
			}
			return nil
		})
	return out
}

// mark records that the session's reviewer reviewed a lease or a destination, with a note.
func (s *Server) mark(w http.ResponseWriter, r *http.Request) {
	sess := sessionOf(r)
	if !s.acts.Allow(sess.CSRF) {
		w.Header().Set("Retry-After", "1")
		s.fail(w, r, http.StatusTooManyRequests, "too many marks from this session; wait a second")
		return
	}
	note := strings.TrimSpace(r.PostFormValue("note"))
	if !utf8.ValidString(note) || len(note) > maxNote {
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("a note is text of at most %d bytes", maxNote))
		return
	}
	rec := audit.Record{Time: s.cfg.Now(), Kind: audit.KindAudit, Event: EventReviewMark, Reviewer: sess.Who, Reason: note}
	lease, host := r.PostFormValue("lease"), normal(strings.TrimSpace(r.PostFormValue("host")))
	switch {
	case lease != "" && host == "":
		tenant, err := sess.tenant(r.PostFormValue("tenant"))
		if err != nil {
			s.fail(w, r, http.StatusForbidden, err.Error())
			return
		}
		l, err := s.lease(r, lease, tenant)
		if err != nil {
			s.fail(w, r, http.StatusNotFound, fmt.Sprintf("lease %q: %v", lease, err))
			return
		}
		rec.Lease, rec.Tenant, rec.Task = l.Lease, l.Tenant, l.Task
	case host != "" && lease == "":
		tenant, err := sess.tenant(r.PostFormValue("tenant"))
		if err != nil {
			s.fail(w, r, http.StatusForbidden, err.Error())
			return
		}
		rec.Host, rec.Tenant = host, tenant
	default:
		s.fail(w, r, http.StatusBadRequest, "a mark names one lease or one host")
		return
	}
	if err := s.cfg.Sink.Write(r.Context(), rec); err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the mark could not be recorded: "+err.Error())
		return
	}
	if !s.flushed(w, r) {
		return
	}
	s.cfg.Logger.Info("review mark", "who", sess.Who, "lease", rec.Lease, "host", rec.Host)
	http.Redirect(w, r, safeNext(r.PostFormValue("back")), http.StatusSeeOther)
}
