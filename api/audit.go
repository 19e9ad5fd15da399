package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/receipt"
)

// AuditTrail is what the API needs of the node's trail.
type AuditTrail interface {
	// Flush makes every record accepted so far visible to Query.
	Flush(ctx context.Context) error
	Query(ctx context.Context, q audit.Query, fn func(audit.Record) error) (audit.Result, error)
}

// Audit query bounds: a page holds at most MaxAuditPage records (DefaultAuditPage when the
// request names no limit).
const (
	DefaultAuditPage = audit.DefaultPage
	MaxAuditPage     = audit.MaxPage
)

// audit streams one page of the tenant's own records matching the query: each record is written
// as it is found, so a page costs the server no more memory than one record.
func (s *Server) audit(w http.ResponseWriter, r *http.Request, tenant string) {
	if s.cfg.Audit == nil {
		writeError(w, http.StatusNotFound, "not_found", "this node keeps no audit trail")
		return
	}
	q, err := audit.ParseQuery(r.URL.Query(), time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	q.Tenant = tenant
	if !s.awaitEnd(w, r, tenant, q.Lease) {
		return
	}
	if err := s.cfg.Audit.Flush(r.Context()); err != nil {
		writeError(w, http.StatusServiceUnavailable, "audit_unavailable", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	n := 0
	w.Write([]byte(`{"records":[`))
	res, err := s.cfg.Audit.Query(r.Context(), q, func(rec audit.Record) error {
		if n > 0 {
			w.Write([]byte{','})
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
		if n++; n%256 == 0 && flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	if err != nil {
		// The status is sent: end the document so the client sees an answer cut short, and
		// say why in the problems.
		s.cfg.Logger.Warn("audit query stopped", "err", err)
		res.Problems = append(res.Problems, audit.Problem{Reason: "the query stopped: " + err.Error()})
		res.More = true
	}
	tail, _ := json.Marshal(struct {
		Next     uint64          `json:"next"`
		More     bool            `json:"more"`
		Problems []audit.Problem `json:"problems,omitempty"`
	}{res.Next, res.More, res.Problems})
	w.Write([]byte("],"))
	w.Write(tail[1:])
}

// receipt serves the signed receipt of one of the tenant's leases, live or ended, as the signed
// note it is (text/plain): the node's trail holds the records, so the lease need not exist any
// more.
func (s *Server) receipt(w http.ResponseWriter, r *http.Request, tenant string) {
	if s.cfg.Receipt == nil {
		writeError(w, http.StatusNotFound, "not_found", "this node makes no receipts (it keeps no signed audit trail)")
		return
	}
	if !s.awaitEnd(w, r, tenant, r.PathValue("id")) {
		return
	}
	msg, err := s.cfg.Receipt(r.Context(), tenant, r.PathValue("id"))
	switch {
	case errors.Is(err, receipt.ErrNoRecords):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "audit_unavailable", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write(msg)
}

// awaitEnd waits, when lease is set and its end is under way on this node, until it is over
// (its workspace recorded, its sandbox destroyed, its end recorded): a release answers before
// that, and a receipt or a query of the lease's records must find them whole. It reports
// whether the call may go on, having answered it when not.
func (s *Server) awaitEnd(w http.ResponseWriter, r *http.Request, tenant, lease string) bool {
	if lease == "" || s.cfg.Pool == nil {
		return true
	}
	if err := s.cfg.Pool.AwaitEnd(r.Context(), tenant, lease); err != nil {
		writeError(w, http.StatusServiceUnavailable, "audit_unavailable", err.Error())
		return false
	}
	return true
}
