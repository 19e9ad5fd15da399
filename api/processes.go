package api

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/pool"
)

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request, tenant string) {
	var req ExecRequest
	if !readJSON(w, r, &req) {
		return
	}
	timeout, ok := readDuration(w, "timeout", req.Timeout)
	if !ok {
		return
	}
	pr := pool.ExecRequest{Cmd: req.Cmd, Env: req.Env, Workdir: req.Workdir, Timeout: timeout, Stdin: req.Stdin}
	if req.TTY {
		setTerminal(req, &pr)
	}
	p, err := s.cfg.Pool.StartProcess(r.Context(), tenant, r.PathValue("id"), pr)
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, tenant string) {
	ps, err := s.cfg.Pool.Processes(r.Context(), tenant, r.PathValue("id"))
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ps)
}

// queryWait reads the optional wait or timeout parameter name, capped at MaxProcessWait.
func queryWait(w http.ResponseWriter, r *http.Request, name string) (time.Duration, bool) {
	d, ok := readDuration(w, name, r.URL.Query().Get(name))
	return min(d, MaxProcessWait), ok
}

func queryOffset(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, "bad_request", name+" "+strconv.Quote(v)+" is not an offset (a whole number of bytes, 0 or more)")
		return 0, false
	}
	return n, true
}

func (s *Server) processOutput(w http.ResponseWriter, r *http.Request, tenant string) {
	outOff, ok1 := queryOffset(w, r, "stdout_offset")
	if !ok1 {
		return
	}
	errOff, ok2 := queryOffset(w, r, "stderr_offset")
	if !ok2 {
		return
	}
	limit, ok3 := queryOffset(w, r, "max")
	if !ok3 {
		return
	}
	wait, ok4 := queryWait(w, r, "wait")
	if !ok4 {
		return
	}
	enc := r.URL.Query().Get("encoding")
	if enc != "" && enc != "utf-8" && enc != "base64" {
		writeError(w, http.StatusBadRequest, "bad_request", "encoding "+strconv.Quote(enc)+" is not utf-8 or base64")
		return
	}
	o, err := s.cfg.Pool.ProcessOutput(r.Context(), tenant, r.PathValue("id"), r.PathValue("pid"), outOff, errOff, int(limit), wait)
	if err != nil {
		writePoolError(w, err)
		return
	}
	v := OutputView{Encoding: "utf-8", StdoutOffset: o.StdoutOffset, StderrOffset: o.StderrOffset,
		StdoutDropped: o.StdoutDropped, StderrDropped: o.StderrDropped, Process: o.Process}
	if enc == "base64" {
		v.Encoding, v.Stdout, v.Stderr = enc, base64.StdEncoding.EncodeToString(o.Stdout), base64.StdEncoding.EncodeToString(o.Stderr)
	} else {
		v.Stdout, v.Stderr = strings.ToValidUTF8(string(o.Stdout), "\uFFFD"), strings.ToValidUTF8(string(o.Stderr), "\uFFFD")
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) waitProcess(w http.ResponseWriter, r *http.Request, tenant string) {
	timeout, ok := queryWait(w, r, "timeout")
	if !ok {
		return
	}
	p, err := s.cfg.Pool.WaitProcess(r.Context(), tenant, r.PathValue("id"), r.PathValue("pid"), timeout)
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request, tenant string) {
	var req SignalRequest
	if !readJSON(w, r, &req) {
		return
	}
	if err := s.cfg.Pool.SignalProcess(r.Context(), tenant, r.PathValue("id"), r.PathValue("pid"), strings.ToUpper(strings.TrimPrefix(req.Signal, "SIG"))); err != nil {
		writePoolError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) processInput(w http.ResponseWriter, r *http.Request, tenant string) {
	data, err := io.ReadAll(io.LimitReader(r.Body, pool.MaxProcessInput+1))
	switch {
	case err != nil:
		writeBodyError(w, fmt.Errorf("reading the input: %w", err))
		return
	case len(data) > pool.MaxProcessInput:
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("one input is at most %d bytes", pool.MaxProcessInput))
		return
	}
	if err := s.cfg.Pool.ProcessInput(r.Context(), tenant, r.PathValue("id"), r.PathValue("pid"), data); err != nil {
		writePoolError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) closeProcessInput(w http.ResponseWriter, r *http.Request, tenant string) {
	if err := s.cfg.Pool.CloseProcessInput(r.Context(), tenant, r.PathValue("id"), r.PathValue("pid")); err != nil {
		writePoolError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) resizeProcess(w http.ResponseWriter, r *http.Request, tenant string) {
	var req ResizeRequest
	if !readJSON(w, r, &req) {
		return
	}
	if err := s.cfg.Pool.ResizeProcess(r.Context(), tenant, r.PathValue("id"), r.PathValue("pid"), req); err != nil {
		writePoolError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
