package apitype

import "time"

// Frame stream ids of an exec stream (see package api): each frame is one byte naming the
// stream, three zero bytes, a big-endian uint32 payload length, then the payload.
const (
	StreamStdout byte = 1
	StreamStderr byte = 2
	StreamExit   byte = 3
	// Frames a client sends in the body of a terminal exec (tty): what it types, and a new size
	// ({"rows":R,"cols":C}). The end of the body is the end of input.
	StreamStdin  byte = 0
	StreamResize byte = 4
)

// ExecHeader carries the exec request (JSON) when the request body is the command's stdin.
const ExecHeader = "X-Airlock-Exec"

// ExecRequest is the body of POST /v1/leases/{id}/exec.
type ExecRequest struct {
	Cmd     []string          `json:"cmd"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Timeout string            `json:"timeout,omitempty"`
	// TTY runs the command on a pseudo-terminal of Rows by Cols (TERM is Term, xterm-256color
	// unless set): its output comes as stdout frames only, and the request body (the request in
	// the ExecHeader) is a stream of stdin and resize frames.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	Term string `json:"term,omitempty"`
	// Stdin keeps a background process's stdin open for POST .../processes/{pid}/stdin (a
	// terminal's always is); an exec sends its stdin as the request body instead.
	Stdin bool `json:"stdin,omitempty"`
}

// ExitStatus is the payload of the exit frame: the exit code, or why there is none, with the
// error's code as an answer would carry it ("timed_out", "lease_not_found").
type ExitStatus struct {
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
	Code     string `json:"code,omitempty"`
}

// MaxProcessWait bounds how long one call waits for a process's output or end.
const MaxProcessWait = time.Minute

// OutputView is the answer of GET /v1/leases/{id}/processes/{pid}/output: what the process
// wrote from the offsets asked for, as text (bytes that are not UTF-8 become U+FFFD) or, with
// ?encoding=base64, as base64.
type OutputView struct {
	Stdout        string      `json:"stdout"`
	Stderr        string      `json:"stderr"`
	Encoding      string      `json:"encoding"` // utf-8 or base64
	StdoutOffset  int64       `json:"stdout_offset"`
	StderrOffset  int64       `json:"stderr_offset"`
	StdoutDropped int64       `json:"stdout_dropped,omitempty"`
	StderrDropped int64       `json:"stderr_dropped,omitempty"`
	Process       ProcessInfo `json:"process"`
}

// SignalRequest is the body of POST /v1/leases/{id}/processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"` // TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT
}

// ResizeRequest is the body of POST /v1/leases/{id}/processes/{pid}/resize.
type ResizeRequest = TermSize
