package review

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// Live tail bounds: the stream looks for new records every tailEvery, sends at most tailBatch
// at a time, and ends after tailFor (the browser reconnects where it left off).
const (
	tailEvery = time.Second
	tailBatch = 200
	tailFor   = 30 * time.Minute
)

func (s *Server) tailPage(w http.ResponseWriter, r *http.Request) {
	p, ok := s.view(w, r, "Live tail", "tail")
	if !ok {
		return
	}
	s.render(w, "tail.html", p)
}

// tailEvent is one record as the tail's script shows it: text only, set with textContent.
type tailEvent struct {
	Seq      uint64 `json:"seq"`
	Time     string `json:"time"`
	Kind     string `json:"kind"`
	Decision string `json:"decision"`
	Rule     string `json:"rule"`
	Lease    string `json:"lease"`
	What     string `json:"what"`
	Why      string `json:"why"`
	Allowing string `json:"allowing,omitempty"`
	Flagged  bool   `json:"flagged,omitempty"`
}

// tailEvents streams, as server-sent events, the records that meet the filters from the head of
// the trail on (or from the seq the browser last saw, when it reconnects). Each event's id is
// its seq, so a reconnection misses nothing and repeats nothing. The stream holds one of the
// node's stream slots (holdStream) and ends after tailFor, or with its session, sending an
// "ended" event then so the browser stops rather than reconnecting.
func (s *Server) tailEvents(w http.ResponseWriter, r *http.Request) {
	sess := sessionOf(r)
	f, err := s.filterOf(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.fail(w, r, http.StatusInternalServerError, "this server cannot stream")
		return
	}
	q := f.Q
	q.Since, q.Limit = time.Time{}, tailBatch
	var last uint64 // the seq the browser saw last, when it reconnects
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if last, err = strconv.ParseUint(id, 10, 64); err != nil {
			s.fail(w, r, http.StatusBadRequest, "Last-Event-ID is not a seq")
			return
		}
	}
	release, ok := s.holdStream(w, r, sess)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := s.sessionContext(r, sess)
	defer cancel()
	if !s.flushed(w, r) {
		return
	}
	q.After = s.cfg.Trail.Written()
	if last != 0 {
		q.After = last
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("retry: 2000\n\n"))
	flusher.Flush()
	tick := time.NewTicker(tailEvery)
	defer tick.Stop()
	end := time.After(tailFor)
	for {
		select {
		case <-ctx.Done():
		case <-end:
			return
		case <-tick.C:
		}
		if s.sessionEnded(ctx, sess) {
			w.Write([]byte("event: ended\ndata: this session has ended (signed out or expired): sign in again to follow\n\n"))
			flusher.Flush()
			return
		}
		if ctx.Err() != nil {
			return
		}
		if err := s.cfg.Trail.Flush(ctx); err != nil {
			w.Write([]byte("event: problem\ndata: the audit trail cannot be read now\n\n"))
			flusher.Flush()
			continue
		}
		for more := true; more; {
			res, err := s.cfg.Trail.Query(ctx, q, func(rec audit.Record) error {
				x := newRow(rec)
				b, _ := json.Marshal(tailEvent{Seq: rec.Seq, Time: rec.Time.UTC().Format("15:04:05.000"), Kind: string(rec.Kind),
					Decision: string(rec.Decision), Rule: string(rec.Rule), Lease: rec.Lease, What: x.What, Why: x.Why,
					Allowing: x.Allowing, Flagged: rec.Flagged})
				_, err := w.Write([]byte("id: " + strconv.FormatUint(rec.Seq, 10) + "\nevent: record\ndata: " + string(b) + "\n\n"))
				return err
			})
			if err != nil {
				return
			}
			q.After, more = res.Next, res.More
		}
		w.Write([]byte(": alive\n\n"))
		flusher.Flush()
	}
}
