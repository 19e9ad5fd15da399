package review

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/export"
)

// exportExt is each format's file name extension.
var exportExt = map[string]string{"csv": "csv", "json": "jsonl", "ocsf": "ocsf.jsonl", "ecs": "ecs.jsonl"}

// export downloads exactly the records the view's filters select, every one of them, oldest
// first, written as `airlock logs --format F` writes them for the same filters. Records of the
// trail that fail their own check are left out, and counted in the trailer
// X-Airlock-Audit-Problems. An export holds one of the node's stream slots while it streams
// (holdStream), and stops when its session ends.
func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	sess := sessionOf(r)
	f, err := s.filterOf(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "json"
	}
	if _, ok := exportExt[format]; !ok {
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("format %q is not csv, json, ocsf or ecs", format))
		return
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
	ew, _ := export.NewWriter(w, format)
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	if format != "csv" {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="airlock-audit-%s.%s"`, s.cfg.Now().UTC().Format("20060102T150405Z"), exportExt[format]))
	h.Set("Trailer", "X-Airlock-Audit-Problems")
	res, err := s.cfg.Trail.Query(ctx, f.Q, func(rec audit.Record) error {
		if err := ctx.Err(); err != nil { // the trail checks only between segments
			return context.Cause(ctx)
		}
		return ew.Write(rec)
	})
	ew.Flush()
	n := len(res.Problems)
	if err != nil {
		s.cfg.Logger.Warn("review export stopped", "err", err)
		n++
	}
	h.Set("X-Airlock-Audit-Problems", strconv.Itoa(n))
}
