package api

import (
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/snapshot"
)

// The state that travels (package pool's keeper): snapshots of a lease's workspace, leases from
// them (POST /v1/leases with "from"), and pause and resume. Snapshots belong to the tenant whose
// key asks: another tenant's is answered as none.

type (
	SnapshotRequest = apitype.SnapshotRequest
	SnapshotView    = apitype.SnapshotView
	PauseRequest    = apitype.PauseRequest
	PauseView       = apitype.PauseView
	ResumeRequest   = apitype.ResumeRequest
)

func snapshotView(m snapshot.Manifest) SnapshotView {
	return SnapshotView{ID: m.ID, Name: m.Name, Tenant: m.Tenant, Template: m.Template, Image: m.Image, Lease: m.Lease,
		Created: m.Created, Size: m.Size, Stored: m.Stored, Files: m.Files, Paths: m.Paths}
}

func pauseView(p pool.Paused) PauseView {
	return PauseView{Lease: p.Lease, Task: p.Task, Template: p.Template, Kept: p.Kept, Snapshot: p.Snapshot,
		Paused: p.Paused, Until: p.Until, TookMS: p.Took.Milliseconds(), Why: p.Why, Keep: p.Keep}
}

func (s *Server) takeSnapshot(w http.ResponseWriter, r *http.Request, tenant string) {
	var req SnapshotRequest
	if !readJSON(w, r, &req) {
		return
	}
	start := time.Now()
	m, err := s.cfg.Pool.Snapshot(r.Context(), tenant, r.PathValue("id"), pool.SnapshotRequest{Name: req.Name, Paths: req.Paths})
	if err != nil {
		writePoolError(w, err)
		return
	}
	v := snapshotView(m)
	v.TookMS = time.Since(start).Milliseconds()
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, tenant string) {
	all, err := s.cfg.Pool.Snapshots(r.Context(), tenant)
	if err != nil {
		writePoolError(w, err)
		return
	}
	out := make([]SnapshotView, 0, len(all))
	for _, m := range all {
		if m.Kind == snapshot.KindSnapshot {
			out = append(out, snapshotView(m))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, tenant string) {
	m, err := s.cfg.Pool.SnapshotInfo(r.Context(), tenant, r.PathValue("ref"))
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, snapshotView(m))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, tenant string) {
	if err := s.cfg.Pool.DeleteSnapshot(r.Context(), tenant, r.PathValue("ref")); err != nil {
		writePoolError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) pauseLease(w http.ResponseWriter, r *http.Request, tenant string) {
	var req PauseRequest
	if r.ContentLength != 0 && !readJSON(w, r, &req) {
		return
	}
	p, err := s.cfg.Pool.PauseWith(r.Context(), tenant, r.PathValue("id"), pool.PauseOptions{Memory: req.Memory, Keep: req.Keep})
	if err != nil {
		writePoolError(w, err)
		return
	}
	s.ports.closeLease(p.Lease)
	writeJSON(w, http.StatusOK, pauseView(p))
}

func (s *Server) resumeLease(w http.ResponseWriter, r *http.Request, tenant string) {
	var req ResumeRequest
	if !readJSON(w, r, &req) {
		return
	}
	ttl, ok := readDuration(w, "ttl", req.TTL)
	if !ok {
		return
	}
	raw := req.Token
	switch {
	case raw != "" && len(req.Allow) > 0:
		writeError(w, http.StatusBadRequest, "bad_request", "give a token or an allow list, not both")
		return
	case raw == "" && s.cfg.Minter == nil:
		writeError(w, http.StatusBadRequest, "token_required", "a task token for the paused lease's task is required: a paused lease keeps none (this node mints none)")
		return
	case raw == "":
		// Minted for the paused lease's own task, as a lease's allow list is for a new one.
		p, err := s.cfg.Pool.PausedLease(r.Context(), tenant, r.PathValue("id"))
		if err != nil {
			writePoolError(w, err)
			return
		}
		mintTTL := ttl
		if t, ok := s.cfg.Pool.Template(p.Template); ok {
			mintTTL = max(mintTTL, t.DefaultTTL, t.MaxTTL)
		}
		if raw, err = s.cfg.Minter.Mint(tenant, p.Task, req.Allow, mintTTL); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
	}
	l, err := s.cfg.Pool.Resume(r.Context(), pool.ResumeRequest{Tenant: tenant, Lease: r.PathValue("id"), Token: raw, TTL: ttl, Key: keyHashOf(r)})
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, view(l))
}
