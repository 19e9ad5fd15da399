// Package agent is the sandbox's exec agent: one long-lived process per sandbox, started by the
// engine once, that runs the node's commands so that a command costs a fork and an exec instead
// of an engine exec (about 47 ms of runc on this machine, where the rest of a command through
// the API costs 3 ms).
//
// The agent is the node's own executable run again inside the sandbox (bind-mounted read-only,
// started with Env set): any binary that imports this package serves as one, since the agent
// takes over in this package's init. It speaks frames on its standard input and output, the
// engine exec's streams, which only the node holds:
//
//	type (1 byte) | id (4 bytes, big-endian) | length (4 bytes, big-endian) | payload
//
// From the node: Start (payload: a JSON Command), Input (bytes for the command's standard
// input), InputEnd, Kill (the command's process group, SIGKILL). From the agent: Output and
// Errors (the command's standard output and error), Exit (payload: the exit code, 4 bytes
// big-endian; after all of the command's output), and Failed (the command could not start; the
// payload says why, and an Exit follows). From a keeper (the sandbox's main process, which
// relays frames to and from an agent it started: keep.go), Gone: that agent stopped.
//
// The agent runs as the sandbox's user, so code in the sandbox can kill or trace it; that gives
// it nothing it does not have (its commands are its own), and the node falls back to the
// engine's exec whenever the agent is gone. The node reads the agent's frames as untrusted
// input: bounded in size, unknown ids ignored, anything malformed ends the agent.
package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Env is the variable that makes a binary importing this package run as the agent; Path is
// where the node mounts its executable in the sandbox.
const (
	Env  = "AIRLOCK_EXEC_AGENT"
	Path = "/.airlock-agent"
)

// ServeArg, as the one argument, makes the binary run as the agent too: how a sandbox whose
// agent is its main process starts it (an environment variable would be every engine exec's
// there too).
const ServeArg = "--airlock-exec-agent"

// Frame types.
const (
	Start    byte = 'S'
	Input    byte = 'I'
	InputEnd byte = 'E'
	Kill     byte = 'K'
	Output   byte = 'O'
	Errors   byte = 'R'
	Exit     byte = 'X'
	Failed   byte = 'F'
	// Gone is a keeper's (keep.go).
)

// MaxPayload bounds one frame's payload either way.
const MaxPayload = 1 << 20

// chunk is the most output one frame carries.
const chunk = 32 << 10

// Command is what a Start frame asks for.
type Command struct {
	Argv []string `json:"argv"`
	// Env is added to the agent's own environment (the container's), replacing what it names.
	Env []string `json:"env,omitempty"`
	Dir string   `json:"dir,omitempty"`
	// Stdin says Input frames follow; without it the command reads an empty input.
	Stdin bool `json:"stdin,omitempty"`
}

// Frame is one message.
type Frame struct {
	Type    byte
	ID      uint32
	Payload []byte
}

// ErrFrame is what ReadFrame returns for a frame no agent or node would send.
var ErrFrame = errors.New("malformed agent frame")

// ReadFrame reads one frame, refusing a payload over MaxPayload or an unknown type.
func ReadFrame(r io.Reader, buf []byte) (Frame, []byte, error) {
	var head [9]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return Frame{}, buf, err
	}
	f := Frame{Type: head[0], ID: binary.BigEndian.Uint32(head[1:5])}
	n := binary.BigEndian.Uint32(head[5:9])
	switch f.Type {
	case Start, Input, InputEnd, Kill, Output, Errors, Exit, Failed, Gone:
	default:
		return Frame{}, buf, fmt.Errorf("%w: type %q", ErrFrame, f.Type)
	}
	if n > MaxPayload {
		return Frame{}, buf, fmt.Errorf("%w: a payload of %d bytes (at most %d)", ErrFrame, n, MaxPayload)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	f.Payload = buf[:n]
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		return Frame{}, buf, fmt.Errorf("%w: cut short: %v", ErrFrame, err)
	}
	return f, buf, nil
}

// AppendFrame appends f's encoding to b.
func AppendFrame(b []byte, f Frame) []byte {
	b = append(b, f.Type)
	b = binary.BigEndian.AppendUint32(b, f.ID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.Payload)))
	return append(b, f.Payload...)
}
