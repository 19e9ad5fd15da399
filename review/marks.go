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

// MarkedBy begins the Reviewer field of every mark this page writes, followed by the reviewer
// key's configured name ("reviewer:secops"): the record says both which key marked and that it
// is a reviewer key. Only reviewer keys mark; the views take a mark only when its record says
// so, which no mark made by a tenant's key ("tenant:acme"), and none written before marks said
// what kind of identity made them (a bare name), does.
const MarkedBy = "reviewer:"

// maxNote bounds a mark's note.
const maxNote = 2000

// mark is the latest review mark of a lease or a destination.
type mark struct {
	// Who is the reviewer key's name.
	Who  string
	Note string
	Time time.Time
	Seq  uint64
}

// reviewerMark returns the reviewer key's name that made rec, when rec is a review mark that
// reviewer key made through this page.
func reviewerMark(rec audit.Record) (string, bool) {
	if rec.Kind != audit.KindAudit || rec.Event != EventReviewMark {
		return "", false
	}
	name, ok := strings.CutPrefix(rec.Reviewer, MarkedBy)
	return name, ok && name != ""
}

// marks returns the latest reviewer mark of each lease ("lease:ID") and destination
// ("host:NAME") of the view that reads tenant (every tenant's for ""). A lease's mark shows
// wherever its lease does; a destination's mark was made for the traffic of the tenant its view
// read, so it shows only in views of that same tenant: a mark made over every tenant's traffic
// speaks of theirs, and one made for acme's says nothing of globex's. Marks from identities that
// are not reviewers are left out whatever they say.
func (s *Server) marks(r *http.Request, tenant string) map[string]*mark {
	out := map[string]*mark{}
	s.cfg.Trail.Query(r.Context(), audit.Query{Kind: string(audit.KindAudit), Event: EventReviewMark, Tenant: tenant},
		func(rec audit.Record) error {
			who, ok := reviewerMark(rec)
			if !ok {
				return nil
			}
			m := &mark{Who: who, Note: rec.Reason, Time: rec.Time, Seq: rec.Seq}
			switch {
			case rec.Lease != "" && rec.Host == "":
				out["lease:"+rec.Lease] = m
			case rec.Host != "" && rec.Lease == "" && rec.Tenant == tenant:
				out["host:"+normal(rec.Host)] = m
			}
			return nil
		})
	return out
}

// mark records that the session's reviewer key reviewed a lease or a destination, with a note.
// Only a reviewer key marks, and only what it reads: a tenant's key (which leased the work, or
// shares the destination with every other tenant) is refused whatever the form says.
func (s *Server) mark(w http.ResponseWriter, r *http.Request) {
	sess := sessionOf(r)
	if !sess.Reviewer {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf("only a reviewer key marks leases and destinations reviewed; this session signed in as %s, "+
			"which may read the marks of its own leases but not make one", sess.Who))
		return
	}
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
	rec := audit.Record{Time: s.cfg.Now(), Kind: audit.KindAudit, Event: EventReviewMark, Reviewer: MarkedBy + sess.Who, Reason: note}
	lease, host := r.PostFormValue("lease"), normal(strings.TrimSpace(r.PostFormValue("host")))
	tenant, err := sess.tenant(r.PostFormValue("tenant"))
	switch {
	case (lease == "") == (host == ""):
		s.fail(w, r, http.StatusBadRequest, "a mark names one lease or one host")
		return
	case err != nil:
		s.fail(w, r, http.StatusForbidden, err.Error())
		return
	case lease != "":
		l, err := s.lease(r, lease, tenant)
		if err != nil {
			s.fail(w, r, http.StatusNotFound, fmt.Sprintf("lease %q: %v", lease, err))
			return
		}
		rec.Lease, rec.Tenant, rec.Task = l.Lease, l.Tenant, l.Task
	default:
		// A destination is every tenant's: the mark is for the traffic of the tenant the
		// reviewer reads ("" for all of them), and shows only where that same tenant is read.
		rec.Host, rec.Tenant = host, tenant
	}
	if err := s.cfg.Sink.Write(r.Context(), rec); err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the mark could not be recorded: "+err.Error())
		return
	}
	if !s.flushed(w, r) {
		return
	}
	s.cfg.Logger.Info("review mark", "who", rec.Reviewer, "lease", rec.Lease, "host", rec.Host, "tenant", rec.Tenant)
	http.Redirect(w, r, safeNext(r.PostFormValue("back")), http.StatusSeeOther)
}
