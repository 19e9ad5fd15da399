package review

import (
	"encoding/json"
	"fmt"
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
// its seq, so a reconnection misses nothing and repeats nothing.
func (s *Server) tailEvents(w http.ResponseWriter, r *http.Request) {
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
	select {
	case s.tails <- struct{}{}:
		defer func() { <-s.tails }()
	default:
		w.Header().Set("Retry-After", "10")
		s.fail(w, r, http.StatusTooManyRequests, fmt.Sprintf("this node already serves %d live tails; close one", maxTails))
		return
	}
	q := f.Q
	q.Since, q.Limit = time.Time{}, tailBatch
	if !s.flushed(w, r) {
		return
	}
	q.After = s.cfg.Trail.Written()
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if q.After, err = strconv.ParseUint(id, 10, 64); err != nil {
			s.fail(w, r, http.StatusBadRequest, "Last-Event-ID is not a seq")
			return
		}
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
		case <-r.Context().Done():
			return
		case <-end:
			return
		case <-tick.C:
		}
		if err := s.cfg.Trail.Flush(r.Context()); err != nil {
			w.Write([]byte("event: problem\ndata: the audit trail cannot be read now\n\n"))
			flusher.Flush()
			continue
		}
		for more := true; more; {
			res, err := s.cfg.Trail.Query(r.Context(), q, func(rec audit.Record) error {
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
