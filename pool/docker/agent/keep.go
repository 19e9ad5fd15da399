package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// KeepArg, as the one argument, makes the binary a sandbox's keeper: its main process, started
// by the engine with the container, which runs an agent as its child (this binary with
// ServeArg) and relays whole frames between the container's streams, which only the node
// attaches to, and that agent's. So a sandbox's agent serves from the moment the sandbox runs,
// without an engine exec to start it (one runc exec less per sandbox).
//
// The agent stays killable from inside, as one started by an engine exec is: when it stops,
// the keeper sends a Gone frame (every command under way through it is lost to the node, as
// at an agent's end of stream) and starts another, which the node attaches to again. A frame
// the agent had only partly written or read when it stopped is dropped, so the node's stream
// and the next agent's start at a frame's beginning. An agent that stops reading its input
// for keepWriteTimeout is killed and replaced the same way.
//
// As the sandbox's PID 1 (in place of Docker's init) the keeper reaps every orphan. It runs as
// the sandbox's user, like the init and idle process it replaces: code in the sandbox can end
// it, and with it the sandbox, as it could end those; it holds nothing that code lacks.
const KeepArg = "--airlock-exec-keeper"

// Gone, from a keeper to the node: the agent that served the stream stopped; no payload. The
// node ends that connection as at the end of its stream.
const Gone byte = 'G'

// keepWriteTimeout bounds one frame's write to the agent: well under the node's writeTimeout,
// so that the keeper replaces an agent that stopped reading before the node gives up on it.
const keepWriteTimeout = 5 * time.Second

// keepRestartGap is the least time between two agents' starts: an agent that cannot run is
// not started again in a busy loop.
const keepRestartGap = time.Second

// Keep is the keeper's work (see KeepArg): it runs agents started by spawn, one after another,
// relaying frames from in to the running one and from it to out. When in ends it goes on as
// an idle sandbox's main process; when in is malformed (only code in the sandbox reading the
// node's stream from under the keeper does that) it kills the running agent and returns, and
// the sandbox ends with it: a stream out of step cannot be trusted to frame a command again.
// spawn starts an agent on the given streams and returns its process id.
func Keep(in io.Reader, out io.Writer, spawn func(stdin, stdout *os.File) (int, error)) {
	k := &keeper{out: out}
	k.started.L = &k.mu
	go func() {
		for {
			began := time.Now()
			k.serveOne(spawn)
			if d := keepRestartGap - time.Since(began); d > 0 {
				time.Sleep(d)
			}
		}
	}()
	if err := k.relayIn(in); errors.Is(err, io.EOF) {
		select {}
	}
	k.mu.Lock()
	if k.pid != 0 {
		syscall.Kill(k.pid, syscall.SIGKILL)
	}
	k.mu.Unlock()
}

type keeper struct {
	out  io.Writer // only serveOne writes to it, one frame at a time
	wbuf []byte

	mu      sync.Mutex // guards agentIn and pid, and serialises writes to agentIn
	started sync.Cond  // on mu: an agent started
	agentIn *os.File   // the running agent's input; nil between agents
	pid     int
}

// serveOne starts one agent and relays its frames to out until its output ends or is
// malformed; then it kills it (it may only have closed its output) and sends Gone.
func (k *keeper) serveOne(spawn func(stdin, stdout *os.File) (int, error)) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return
	}
	pid, err := spawn(inR, outW)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return
	}
	k.mu.Lock()
	k.agentIn, k.pid = inW, pid
	k.started.Broadcast()
	k.mu.Unlock()
	r := bufio.NewReaderSize(outR, 64<<10)
	var buf []byte
	for {
		var f Frame
		f, buf, err = ReadFrame(r, buf)
		if err != nil {
			break
		}
		if !fromAgent(f.Type) {
			// A node's frame, or a keeper's Gone, written by what runs as the sandbox's user
			// into the agent's output (its files under /proc are that user's): relayed, a
			// forged Gone would have the node drop its connection and attach again mid-frame.
			err = fmt.Errorf("%w: the agent wrote a %q frame, which only the node or the keeper writes", ErrFrame, f.Type)
			break
		}
		k.wbuf = AppendFrame(k.wbuf[:0], f)
		k.out.Write(k.wbuf)
	}
	outR.Close()
	k.mu.Lock()
	k.agentIn.Close() // an agent that only closed its output reads the end of its input, and exits
	k.agentIn, k.pid = nil, 0
	k.mu.Unlock()
	if !errors.Is(err, io.EOF) {
		// It wrote what no agent writes, so it runs (killed only now, its pid is its own).
		syscall.Kill(pid, syscall.SIGKILL)
	}
	k.wbuf = AppendFrame(k.wbuf[:0], Frame{Type: Gone})
	k.out.Write(k.wbuf)
}

// fromAgent reports whether an agent writes frames of type t: what its commands print, and
// how they ended.
func fromAgent(t byte) bool {
	switch t {
	case Output, Errors, Exit, Failed:
		return true
	}
	return false
}

// relayIn hands each whole frame from in to the running agent, waiting between agents for the
// next: the node's next connection may send before it starts, and a frame of the connection
// told Gone that the next agent runs is one whose command that connection said may have run
// (ErrStarted). An agent that does not take a frame within keepWriteTimeout is killed, which
// ends its output and so serveOne's relay.
func (k *keeper) relayIn(in io.Reader) error {
	r := bufio.NewReaderSize(in, 64<<10)
	var buf, wbuf []byte
	for {
		f, b, err := ReadFrame(r, buf)
		buf = b
		if err != nil {
			return err
		}
		wbuf = AppendFrame(wbuf[:0], f)
		k.mu.Lock()
		for k.agentIn == nil {
			k.started.Wait()
		}
		k.agentIn.SetWriteDeadline(time.Now().Add(keepWriteTimeout))
		// A closed input (EPIPE) is an agent that ended, which serveOne sees; one that stopped
		// reading is alive, and killed.
		if _, err := k.agentIn.Write(wbuf); errors.Is(err, os.ErrDeadlineExceeded) {
			syscall.Kill(k.pid, syscall.SIGKILL)
		}
		k.mu.Unlock()
	}
}

// reap waits for every child that ends (the keeper's agents, and as PID 1 every orphan in the
// sandbox), so that none stays a zombie.
func reap() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		<-ch
	}
}

// keepMain is the keeper's process: it reaps, and keeps agents that are this executable
// started with ServeArg, relaying the container's standard streams to them. It makes itself
// undumpable, so that code in the sandbox, whose user it runs as, cannot open its files under
// /proc (the node's stream among them); the agents it starts are as an engine exec's were.
func keepMain() {
	syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
	go reap()
	self, err := os.Executable()
	if err != nil {
		self = Path
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		os.Exit(1)
	}
	Keep(os.Stdin, os.Stdout, func(stdin, stdout *os.File) (int, error) {
		return syscall.ForkExec(self, []string{self, ServeArg}, &syscall.ProcAttr{
			Env:   os.Environ(),
			Files: []uintptr{stdin.Fd(), stdout.Fd(), null.Fd()},
			Sys:   &syscall.SysProcAttr{Setsid: true},
		})
	})
}
