package agent

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// ErrGone is what a command gets when the agent stops under it, or was gone before it started.
var ErrGone = errors.New("the sandbox's exec agent stopped")

// Conn is the node's side of one sandbox's agent: any number of commands at once over the
// agent's streams. A slow reader of one command's output holds up the others' (they share the
// stream), as each command's output is written to its writers as it arrives.
type Conn struct {
	w     io.Writer
	close func()
	wmu   sync.Mutex
	wbuf  []byte

	mu    sync.Mutex
	next  uint32
	calls map[uint32]*call
	err   error // why the agent is gone; nil while it serves
	done  chan struct{}
}

type call struct {
	stdout, stderr io.Writer
	exit           chan int
}

// NewConn serves commands over an agent that reads frames from w and writes them to r; close
// ends the agent (it is called once, when the agent is found gone or Close is called).
func NewConn(r io.Reader, w io.Writer, close func()) *Conn {
	c := &Conn{w: w, close: close, calls: map[uint32]*call{}, done: make(chan struct{}), next: firstID()}
	go c.read(r)
	return c
}

// firstID is where a connection's command ids start: at random, since an agent may outlive
// the connection that started its commands (the main process of a sandbox that keeps its
// memory across a pause, reattached after its restore), and its commands still running then
// report under their ids, which a new connection must not take for its own.
func firstID() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// Alive reports whether the agent still serves.
func (c *Conn) Alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}

// Close ends the agent and every command still running through it.
func (c *Conn) Close() { c.stop(ErrGone) }

func (c *Conn) stop(err error) { c.end(err, false) }

// end is stop; holdingW says the caller holds wmu (a send that failed).
func (c *Conn) end(err error, holdingW bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	c.calls = map[uint32]*call{}
	close(c.done)
	c.mu.Unlock()
	// Between two frames, never in one: an agent that outlives the connection (a sandbox's main
	// process) reads whole frames only, and reads the next connection's first frame as one. A
	// write under way ends within writeTimeout.
	if !holdingW {
		c.wmu.Lock()
		defer c.wmu.Unlock()
	}
	c.close()
}

// read hands each frame from the agent to its command; anything malformed, or a frame only the
// node sends, ends the agent.
func (c *Conn) read(r io.Reader) {
	var buf []byte
	for {
		f, b, err := ReadFrame(r, buf)
		buf = b
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = ErrGone
			} else {
				err = fmt.Errorf("%w: %v", ErrGone, err)
			}
			c.stop(err)
			return
		}
		if f.Type == Gone {
			c.stop(ErrGone) // as at the end of an agent's own stream
			return
		}
		c.mu.Lock()
		cl := c.calls[f.ID]
		if f.Type == Exit {
			delete(c.calls, f.ID)
		}
		c.mu.Unlock()
		if cl == nil {
			continue // a command the node gave up on
		}
		switch f.Type {
		case Output:
			cl.stdout.Write(f.Payload)
		case Errors:
			cl.stderr.Write(f.Payload)
		case Failed:
			cl.stderr.Write(append(f.Payload, '\n'))
		case Exit:
			if len(f.Payload) != 4 {
				c.stop(fmt.Errorf("%w: an exit of %d bytes", ErrGone, len(f.Payload)))
				return
			}
			cl.exit <- int(int32(binary.BigEndian.Uint32(f.Payload)))
		default:
			c.stop(fmt.Errorf("%w: it sent a %q frame, which only the node sends", ErrGone, f.Type))
			return
		}
	}
}

// writeTimeout bounds one frame's write: an agent that stops reading (code in the sandbox can
// stop it) is given up, instead of holding every later command's frames behind it.
const writeTimeout = 10 * time.Second

func (c *Conn) send(f Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = AppendFrame(c.wbuf[:0], f)
	if d, ok := c.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		d.SetWriteDeadline(time.Now().Add(writeTimeout))
	}
	if _, err := c.w.Write(c.wbuf); err != nil {
		c.end(fmt.Errorf("%w: %v", ErrGone, err), true)
		return ErrGone
	}
	return nil
}

// ErrTooLarge is Run's error for a command whose frame would be over MaxPayload; it was not
// sent, so it can be run another way.
var ErrTooLarge = errors.New("a command too large for the agent")

// ErrStarted is Run's error when the command may have started: it must not be run again elsewhere.
var ErrStarted = errors.New("the command may have run")

// Run runs cmd and returns its exit code once it has exited and its output has ended. When ctx
// ends first, the command's process group is killed and ctx's error returned. An error that
// wraps ErrGone without ErrStarted means the command never started, so it can be run another way.
func (c *Conn) Run(ctx context.Context, cmd Command, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	payload, err := json.Marshal(cmd)
	if err != nil {
		return -1, err
	}
	if len(payload) > MaxPayload {
		return -1, fmt.Errorf("%w: a command of %d bytes (at most %d)", ErrTooLarge, len(payload), MaxPayload)
	}
	cl := &call{stdout: stdout, stderr: stderr, exit: make(chan int, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return -1, err
	}
	c.next++
	id := c.next
	for c.calls[id] != nil { // after 2^32 commands
		c.next++
		id = c.next
	}
	c.calls[id] = cl
	c.mu.Unlock()
	if err := c.send(Frame{Type: Start, ID: id, Payload: payload}); err != nil {
		return -1, fmt.Errorf("%w (%w)", err, ErrStarted)
	}
	if stdin != nil {
		go func() {
			b := make([]byte, chunk)
			for {
				n, err := stdin.Read(b)
				if n > 0 && c.send(Frame{Type: Input, ID: id, Payload: b[:n]}) != nil {
					return
				}
				if err != nil {
					c.send(Frame{Type: InputEnd, ID: id})
					return
				}
			}
		}()
	}
	select {
	case code := <-cl.exit:
		return code, nil
	case <-c.done:
		return -1, fmt.Errorf("%w (%w)", c.gone(), ErrStarted)
	case <-ctx.Done():
	}
	c.send(Frame{Type: Kill, ID: id})
	select {
	case <-cl.exit:
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
	}
	return -1, ctx.Err()
}

func (c *Conn) gone() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
