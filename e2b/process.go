package e2b

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/pool"
)

// process.Process: every command is a background process of the lease (POST
// /v1/leases/{id}/processes), so a stream that ends (a disconnect, its timeout) leaves it running
// for Connect, List, SendInput and SendSignal. Its pid is the process id's hex: p-0000002a is 42.

func (s *Server) envdRoutes() {
	const p, f = "POST /process.Process/", "POST /filesystem.Filesystem/"
	s.envd.HandleFunc(p+"Start", s.serverStream(s.start))
	s.envd.HandleFunc(p+"Connect", s.serverStream(s.connectProcess))
	s.envd.HandleFunc(p+"List", s.unary(s.listProcesses))
	s.envd.HandleFunc(p+"SendInput", s.unary(s.sendInput))
	s.envd.HandleFunc(p+"SendSignal", s.unary(s.sendSignal))
	s.envd.HandleFunc(p+"CloseStdin", s.unary(s.closeStdin))
	s.envd.HandleFunc(p+"Update", s.unary(s.update))
	s.envd.HandleFunc(p+"StreamInput", unimplemented("StreamInput (a client stream) is not served: send input with SendInput"))
	s.envd.HandleFunc(f+"Stat", s.unary(s.stat))
	s.envd.HandleFunc(f+"ListDir", s.unary(s.listDir))
	s.envd.HandleFunc(f+"MakeDir", s.unary(s.makeDir))
	s.envd.HandleFunc(f+"Move", s.unary(s.move))
	s.envd.HandleFunc(f+"Remove", s.unary(s.remove))
	s.envd.HandleFunc(f+"WatchDir", s.serverStream(s.watchDir))
	for _, m := range []string{"CreateWatcher", "GetWatcherEvents", "RemoveWatcher"} {
		s.envd.HandleFunc(f+m, unimplemented(m+" is not served: watch a folder with WatchDir"))
	}
	s.envd.HandleFunc("GET /files", s.readFile)
	s.envd.HandleFunc("POST /files", s.writeFiles)
	s.envd.HandleFunc("GET /health", s.health)
	s.envd.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": http.StatusNotFound,
			"message": fmt.Sprintf("the sandbox API has no %s %s", r.Method, r.URL.Path)})
	})
}

// Messages of process.proto, in proto3's JSON mapping.
type (
	processConfig struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args"`
		Envs map[string]string `json:"envs"`
		Cwd  *string           `json:"cwd,omitempty"`
	}
	ptyRequest struct {
		Size *struct {
			Cols uint32 `json:"cols"`
			Rows uint32 `json:"rows"`
		} `json:"size"`
	}
	selector struct {
		Pid *uint32 `json:"pid"`
		Tag *string `json:"tag"`
	}
	processInfo struct {
		Config processConfig `json:"config"`
		Pid    uint32        `json:"pid"`
	}
	processEvent struct {
		Start *struct {
			Pid uint32 `json:"pid"`
		} `json:"start,omitempty"`
		Data      *dataEvent `json:"data,omitempty"`
		End       *endEvent  `json:"end,omitempty"`
		Keepalive *struct{}  `json:"keepalive,omitempty"`
	}
	dataEvent struct {
		Stdout []byte `json:"stdout,omitempty"`
		Stderr []byte `json:"stderr,omitempty"`
		Pty    []byte `json:"pty,omitempty"`
	}
	endEvent struct {
		ExitCode int32   `json:"exitCode"`
		Exited   bool    `json:"exited"`
		Status   string  `json:"status"`
		Error    *string `json:"error,omitempty"`
	}
	eventMessage struct {
		Event processEvent `json:"event"`
	}
)

// pidOf is the SDK's pid for process id p-XXXXXXXX.
func pidOf(id string) uint32 {
	n, _ := strconv.ParseUint(strings.TrimPrefix(id, "p-"), 16, 32)
	return uint32(n)
}

// processID is the process a selector names.
func processID(sel *selector) (string, error) {
	switch {
	case sel == nil:
		return "", rpcErr("invalid_argument", "the request names no process")
	case sel.Tag != nil:
		return "", rpcErr("invalid_argument", "processes are selected by pid here, not by tag")
	case sel.Pid == nil || *sel.Pid == 0:
		return "", rpcErr("invalid_argument", "the request names no pid")
	}
	return fmt.Sprintf("p-%08x", *sel.Pid), nil
}

func (s *Server) start(c call, st *stream) error {
	var req struct {
		Process *processConfig `json:"process"`
		PTY     *ptyRequest    `json:"pty"`
		Tag     *string        `json:"tag"`
		Stdin   *bool          `json:"stdin"`
	}
	if err := c.decode(&req); err != nil {
		return err
	}
	if req.Process == nil || req.Process.Cmd == "" {
		return rpcErr("invalid_argument", "process.cmd is required")
	}
	if req.Tag != nil {
		return rpcErr("invalid_argument", "tagged processes are not served: select processes by pid")
	}
	ex := api.ExecRequest{Cmd: append([]string{req.Process.Cmd}, req.Process.Args...), Env: req.Process.Envs,
		Stdin: req.Stdin == nil || *req.Stdin} // envd keeps stdin open unless told not to
	if req.Process.Cwd != nil {
		ex.Workdir = *req.Process.Cwd
	}
	if req.PTY != nil {
		if req.PTY.Size == nil || req.PTY.Size.Rows == 0 || req.PTY.Size.Cols == 0 || req.PTY.Size.Rows > 1000 || req.PTY.Size.Cols > 1000 {
			return rpcErr("invalid_argument", "pty.size needs rows and cols from 1 to 1000")
		}
		ex.TTY, ex.Rows, ex.Cols, ex.Term = true, uint16(req.PTY.Size.Rows), uint16(req.PTY.Size.Cols), req.Process.Envs["TERM"]
	}
	p, err := c.api.StartProcess(c.ctx, c.id, ex)
	if err != nil {
		return err
	}
	return s.follow(c, st, p, 0, 0)
}

func (s *Server) connectProcess(c call, st *stream) error {
	var req struct {
		Process *selector `json:"process"`
	}
	if err := c.decode(&req); err != nil {
		return err
	}
	p, err := s.running(c, req.Process)
	if err != nil {
		return err
	}
	// A connection gets what the process writes from now on, as envd's does.
	return s.follow(c, st, p, p.StdoutBytes, p.StderrBytes)
}

// running is the process sel names in the call's sandbox while it runs; an ended one is not
// found, as envd forgets processes when they end.
func (s *Server) running(c call, sel *selector) (pool.ProcessInfo, error) {
	pid, err := processID(sel)
	if err != nil {
		return pool.ProcessInfo{}, err
	}
	ps, err := c.api.Processes(c.ctx, c.id)
	if err != nil {
		return pool.ProcessInfo{}, err
	}
	for _, p := range ps {
		if p.ID == pid && p.Running {
			return p, nil
		}
	}
	return pool.ProcessInfo{}, rpcErr("not_found", "process with pid %d not found", pidOf(pid))
}

// follow streams process p from the given offsets: its start, what it writes, its end.
func (s *Server) follow(c call, st *stream, p pool.ProcessInfo, outOff, errOff int64) error {
	start := eventMessage{}
	start.Event.Start = &struct {
		Pid uint32 `json:"pid"`
	}{pidOf(p.ID)}
	if err := st.send(start); err != nil {
		return err
	}
	idle := keepalive(c.r)
	for {
		o, err := c.api.ProcessOutput(c.ctx, c.id, p.ID, client.OutputQuery{StdoutOffset: outOff, StderrOffset: errOff, Wait: idle, Base64: true})
		if err != nil {
			return err
		}
		stdout, err1 := base64.StdEncoding.DecodeString(o.Stdout)
		stderr, err2 := base64.StdEncoding.DecodeString(o.Stderr)
		if err1 != nil || err2 != nil {
			return rpcErr("internal", "the process's output did not decode")
		}
		outOff, errOff = o.StdoutOffset, o.StderrOffset
		switch {
		case len(stdout) > 0 && p.TTY:
			err = st.send(eventMessage{Event: processEvent{Data: &dataEvent{Pty: stdout}}})
		case len(stdout) > 0:
			err = st.send(eventMessage{Event: processEvent{Data: &dataEvent{Stdout: stdout}}})
		}
		if err == nil && len(stderr) > 0 {
			err = st.send(eventMessage{Event: processEvent{Data: &dataEvent{Stderr: stderr}}})
		}
		if err != nil {
			return err
		}
		if len(stdout) > 0 || len(stderr) > 0 {
			// Output that comes in a trickle is gathered for a moment, so one stream makes at
			// most 50 calls a second of its key's API rate.
			if o.Process.Running {
				select {
				case <-time.After(20 * time.Millisecond):
				case <-c.ctx.Done():
					return c.ctx.Err()
				}
			}
			continue
		}
		if !o.Process.Running {
			return st.send(eventMessage{Event: processEvent{End: endOf(o.Process)}})
		}
		if err := st.send(eventMessage{Event: processEvent{Keepalive: &struct{}{}}}); err != nil {
			return err
		}
	}
}

// endOf is the end event of an ended process.
func endOf(p pool.ProcessInfo) *endEvent {
	if p.ExitCode == nil {
		msg := p.Error
		if msg == "" {
			msg = "the process ended without an exit status"
		}
		return &endEvent{ExitCode: -1, Status: "terminated", Error: &msg}
	}
	e := &endEvent{ExitCode: int32(*p.ExitCode), Exited: true, Status: fmt.Sprintf("exit status %d", *p.ExitCode)}
	if *p.ExitCode != 0 {
		e.Error = &e.Status
	}
	return e
}

func (s *Server) listProcesses(c call) (any, error) {
	if err := c.decode(&struct{}{}); err != nil {
		return nil, err
	}
	ps, err := c.api.Processes(c.ctx, c.id)
	if err != nil {
		return nil, err
	}
	out := []processInfo{}
	for _, p := range ps {
		if !p.Running || len(p.Cmd) == 0 || pool.IsWatch(p.Cmd) { // a WatchDir's watch is not the user's command
			continue
		}
		pi := processInfo{Pid: pidOf(p.ID), Config: processConfig{Cmd: p.Cmd[0], Args: p.Cmd[1:], Envs: map[string]string{}}}
		if p.Workdir != "" {
			pi.Config.Cwd = &p.Workdir
		}
		out = append(out, pi)
	}
	return map[string]any{"processes": out}, nil
}

func (s *Server) sendInput(c call) (any, error) {
	var req struct {
		Process *selector `json:"process"`
		Input   *struct {
			Stdin []byte `json:"stdin"`
			Pty   []byte `json:"pty"`
		} `json:"input"`
	}
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.Input == nil {
		return nil, rpcErr("invalid_argument", "the request has no input")
	}
	p, err := s.running(c, req.Process)
	if err != nil {
		return nil, err
	}
	return struct{}{}, c.api.SendInput(c.ctx, c.id, p.ID, append(req.Input.Stdin, req.Input.Pty...))
}

// signalName reads process.Signal by name or number.
type signalName string

func (n *signalName) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v {
	case "SIGNAL_SIGKILL", float64(9):
		*n = "KILL"
	case "SIGNAL_SIGTERM", float64(15):
		*n = "TERM"
	default:
		return fmt.Errorf("signal %s is not SIGNAL_SIGKILL or SIGNAL_SIGTERM", b)
	}
	return nil
}

func (s *Server) sendSignal(c call) (any, error) {
	var req struct {
		Process *selector  `json:"process"`
		Signal  signalName `json:"signal"`
	}
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.Signal == "" {
		return nil, rpcErr("invalid_argument", "the request names no signal")
	}
	p, err := s.running(c, req.Process)
	if err != nil {
		return nil, err
	}
	return struct{}{}, c.api.SignalProcess(c.ctx, c.id, p.ID, string(req.Signal))
}

func (s *Server) closeStdin(c call) (any, error) {
	var req struct {
		Process *selector `json:"process"`
	}
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	p, err := s.running(c, req.Process)
	if err != nil {
		return nil, err
	}
	return struct{}{}, c.api.CloseInput(c.ctx, c.id, p.ID)
}

func (s *Server) update(c call) (any, error) {
	var req struct {
		Process *selector   `json:"process"`
		PTY     *ptyRequest `json:"pty"`
	}
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if _, err := processID(req.Process); err != nil {
		return nil, err
	}
	if req.PTY == nil || req.PTY.Size == nil {
		return struct{}{}, nil // nothing to change
	}
	if req.PTY.Size.Rows > 1000 || req.PTY.Size.Cols > 1000 {
		return nil, rpcErr("invalid_argument", "pty.size needs rows and cols from 1 to 1000")
	}
	p, err := s.running(c, req.Process)
	if err != nil {
		return nil, err
	}
	return struct{}{}, c.api.ResizeProcess(c.ctx, c.id, p.ID, pool.TermSize{Rows: uint16(req.PTY.Size.Rows), Cols: uint16(req.PTY.Size.Cols)})
}
