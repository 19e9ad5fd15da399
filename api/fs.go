package api

import (
	"net/http"
	"strconv"
)

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, tenant string) {
	q := r.URL.Query()
	depth := 1
	if v := q.Get("depth"); v != "" {
		d, err := strconv.Atoi(v)
		if err != nil || d < 1 {
			writeError(w, http.StatusBadRequest, "bad_request", "depth "+strconv.Quote(v)+" is not a whole number of at least 1")
			return
		}
		depth = d
	}
	es, cut, err := s.cfg.Pool.ListFiles(r.Context(), tenant, r.PathValue("id"), q.Get("path"), depth)
	if err != nil {
		writePoolError(w, err)
		return
	}
	p := q.Get("path")
	writeJSON(w, http.StatusOK, ListView{Path: p, Entries: es, Truncated: cut})
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request, tenant string) {
	e, err := s.cfg.Pool.Stat(r.Context(), tenant, r.PathValue("id"), r.URL.Query().Get("path"))
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, tenant string) {
	var req PathRequest
	if !readJSON(w, r, &req) {
		return
	}
	if err := s.cfg.Pool.Mkdir(r.Context(), tenant, r.PathValue("id"), req.Path); err != nil {
		writePoolError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request, tenant string) {
	var req PathRequest
	if !readJSON(w, r, &req) {
		return
	}
	if err := s.cfg.Pool.Remove(r.Context(), tenant, r.PathValue("id"), req.Path, req.Recursive); err != nil {
		writePoolError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) move(w http.ResponseWriter, r *http.Request, tenant string) {
	var req MoveRequest
	if !readJSON(w, r, &req) {
		return
	}
	if err := s.cfg.Pool.Move(r.Context(), tenant, r.PathValue("id"), req.From, req.To, req.Overwrite); err != nil {
		writePoolError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
