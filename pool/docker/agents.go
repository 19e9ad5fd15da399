package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/docker/agent"
)

// SelfAgent is the exec agent for this process's sandboxes: airlock-agent beside its executable
// (a 2 MB static binary, some 3 MiB resident per sandbox), else the executable itself, which
// serves as one too (it imports package agent through this one) at the cost of its size; empty
// when neither can be found.
func SelfAgent() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return ""
	}
	if small := filepath.Join(filepath.Dir(p), "airlock-agent"); isFile(small) {
		return small
	}
	return p
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// agents holds each sandbox's exec agent: started once by an engine exec when the sandbox is
// made (or, for one adopted after a restart, at its first command), it runs every later
// command without the engine. A sandbox whose agent is gone (its image cannot run it, or code
// in it killed it) runs commands by engine exec, and its agent is started again in the
// background.
type agents struct {
	mu       sync.Mutex
	conns    map[string]*agent.Conn
	starting map[string]chan struct{} // closed when the start ends
	dropped  map[string]bool          // destroyed while its agent was starting
	failed   map[string]time.Time     // when a start last failed: not tried again for a while
}

// retryAfter is how long a sandbox whose agent would not start runs its commands by engine
// exec before its agent is tried again: an image that cannot run it would otherwise cost an
// engine exec more for every command. (An agent that dies after it started is started again
// at once, by the next command.)
const retryAfter = time.Minute

func (a *agents) get(id string) *agent.Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns[id]
}

func (a *agents) drop(id string) {
	a.mu.Lock()
	c := a.conns[id]
	delete(a.conns, id)
	delete(a.failed, id)
	if a.starting[id] != nil {
		if a.dropped == nil {
			a.dropped = map[string]bool{}
		}
		a.dropped[id] = true
	}
	a.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// claim reports whether the caller should start id's agent (none is running or starting).
func (a *agents) claim(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.conns[id]; c != nil && c.Alive() || a.starting[id] != nil {
		return false
	}
	if t, ok := a.failed[id]; ok && time.Since(t) < retryAfter {
		return false
	}
	if a.starting == nil {
		a.starting = map[string]chan struct{}{}
	}
	a.starting[id] = make(chan struct{})
	return true
}

func (a *agents) started(id string, c *agent.Conn) {
	a.mu.Lock()
	if ch := a.starting[id]; ch != nil {
		close(ch)
		delete(a.starting, id)
	}
	gone := a.dropped[id]
	if gone {
		delete(a.dropped, id)
		if c != nil {
			defer c.Close() // its sandbox is gone
		}
		c = nil
	}
	if c != nil {
		if a.conns == nil {
			a.conns = map[string]*agent.Conn{}
		}
		a.conns[id] = c
		delete(a.failed, id)
	} else if !gone {
		if a.failed == nil {
			a.failed = map[string]time.Time{}
		}
		a.failed[id] = time.Now()
	}
	a.mu.Unlock()
}

// wait waits, at most d, for a start of id's agent under way to end.
func (a *agents) wait(id string, d time.Duration) { a.waitCtx(context.Background(), id, d) }

// waitCtx is wait, cut short when ctx ends.
func (a *agents) waitCtx(ctx context.Context, id string, d time.Duration) {
	a.mu.Lock()
	ch := a.starting[id]
	a.mu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
}

// agentWait is how long a command waits for its sandbox's agent to start before it is left to
// an engine exec.
const agentWait = time.Second

// startAgent starts sb's agent in the background (kept: its keeper's, known to serve on the
// container's streams, is attached to without asking the engine how sb was made) and checks
// that it runs a command; on any failure the sandbox goes on without one (its commands are
// engine execs).
func (r *Runtime) startAgent(ctx context.Context, sb pool.Sandbox, kept bool) {
	if r.cfg.Agent == "" || !r.agents.claim(sb.ID) {
		return
	}
	go r.runAgent(ctx, sb, kept)
}

// mainAgent makes cc's main process the exec agent, its streams the container's (which only the
// node attaches to, and which no log keeps: they carry the commands' output): what a template
// whose pauses keep memory runs (pool.SnapshotPolicy.Memory). A checkpoint keeps the processes
// of the sandbox's main process and not those of an exec, so only then do the commands the
// agent runs come back after a restore, the agent with them (reattached by runAgent).
// Docker's init stays PID 1 and reaps what the agent's commands leave behind.
func mainAgent(cc *container.Config, hc *container.HostConfig) {
	cc.Entrypoint, cc.Cmd = []string{agent.Path, agent.ServeArg}, nil
	cc.OpenStdin, cc.StdinOnce = true, false
	cc.AttachStdin, cc.AttachStdout, cc.AttachStderr = true, true, true
	hc.LogConfig = container.LogConfig{Type: "none"}
}

// isMainAgent reports whether cc runs the exec agent as its main process (mainAgent).
func isMainAgent(cc *container.Config) bool {
	return cc != nil && cc.OpenStdin && len(cc.Entrypoint) == 2 && cc.Entrypoint[0] == agent.Path && cc.Entrypoint[1] == agent.ServeArg
}

// keeperAgent makes cc's main process the agent's keeper (agent.KeepArg), its streams the
// container's, as mainAgent's: what every template runs but those whose pauses keep memory and
// those under gVisor. The sandbox's agent then serves from its start, without the engine exec
// that would start it (a runc exec, some 45 ms of a sandbox's making here, and its CPU); one
// that code in the sandbox kills is replaced by the keeper, as an exec'd one is by the node.
// The keeper is PID 1, in place of Docker's init, and reaps what commands leave behind as it
// did; it runs as the sandbox's user, with every limit the idle process it replaces had.
func keeperAgent(cc *container.Config, hc *container.HostConfig) {
	cc.Entrypoint, cc.Cmd = []string{agent.Path, agent.KeepArg}, nil
	cc.OpenStdin, cc.StdinOnce = true, false
	cc.AttachStdin, cc.AttachStdout, cc.AttachStderr = true, true, true
	hc.LogConfig = container.LogConfig{Type: "none"}
	noInit := false
	hc.Init = &noInit
}

// isKeeper reports whether cc runs the agent's keeper as its main process (keeperAgent).
func isKeeper(cc *container.Config) bool {
	return cc != nil && cc.OpenStdin && len(cc.Entrypoint) == 2 && cc.Entrypoint[0] == agent.Path && cc.Entrypoint[1] == agent.KeepArg
}

// runAgent reaches sb's agent: attached to, when sb's main process is the agent (mainAgent) or
// its keeper (kept, or keeperAgent as the engine says), else started by an engine exec, as is
// a keeper's whose attachment does not serve.
func (r *Runtime) runAgent(ctx context.Context, sb pool.Sandbox, kept bool) {
	var conn *agent.Conn
	defer func() { r.agents.started(sb.ID, conn) }()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if !kept {
		ins, err := r.cli.ContainerInspect(ctx, sb.ID)
		if err == nil && isMainAgent(ins.Config) {
			conn = r.attachAgent(ctx, sb.ID)
			return
		}
		kept = err == nil && isKeeper(ins.Config)
	}
	if kept {
		// Bounded apart, so that an exec has time left to start an agent if this fails.
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		conn = r.attachAgent(actx, sb.ID)
		acancel()
		if conn != nil {
			return
		}
	}
	ex, err := r.cli.ContainerExecCreate(ctx, sb.ID, container.ExecOptions{
		Cmd: []string{agent.Path}, Env: []string{agent.Env + "=1"},
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return
	}
	// The attachment outlives this call: it is the agent's streams for the sandbox's life.
	att, err := r.cli.ContainerExecAttach(context.WithoutCancel(ctx), ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, att.Reader)
		pw.CloseWithError(err) // nil: the reader sees EOF
	}()
	conn = serving(ctx, agent.NewConn(pr, att.Conn, func() { att.Close(); pr.Close() }))
}

// attachAgent attaches to the agent that is container id's main process, or returns nil.
// Closing the connection detaches: the agent and what it runs go on, for the next attach.
func (r *Runtime) attachAgent(ctx context.Context, id string) *agent.Conn {
	// The attachment outlives this call, as an exec agent's does.
	att, err := r.cli.ContainerAttach(context.WithoutCancel(ctx), id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, att.Reader)
		pw.CloseWithError(err)
	}()
	return serving(ctx, agent.NewConn(pr, att.Conn, func() { att.Close(); pr.Close() }))
}

// serving returns c once it has run a command, or closes it and returns nil.
func serving(ctx context.Context, c *agent.Conn) *agent.Conn {
	if code, err := c.Run(ctx, agent.Command{Argv: []string{"true"}}, nil, io.Discard, io.Discard); err != nil || code != 0 {
		c.Close()
		return nil
	}
	return c
}

// agentExec runs req through sb's agent; ran is false when there is none serving, and then
// the command has not started (the caller runs it by engine exec). A command cut off by ctx is
// killed with its process group (what carries its marker is the policy's to kill:
// pool.WithPolicy).
func (r *Runtime) agentExec(ctx context.Context, sb pool.Sandbox, req pool.ExecRequest, env []string, stdin io.Reader,
	stdout, stderr io.Writer) (code int, ran bool, err error) {
	if r.cfg.Agent == "" {
		return 0, false, nil
	}
	c := r.agents.get(sb.ID)
	if c == nil || !c.Alive() {
		// A start under way (a sandbox just made, whose keeper's agent takes a few ms to attach
		// to) is waited for a moment: an engine exec costs more, in time and CPU, than most
		// starts take. One that takes longer leaves this command to the engine.
		r.startAgent(ctx, sb, false)
		r.agents.waitCtx(ctx, sb.ID, agentWait)
		if c = r.agents.get(sb.ID); c == nil || !c.Alive() {
			return 0, false, nil
		}
	}
	code, err = c.Run(ctx, agent.Command{Argv: req.Cmd, Env: env, Dir: req.Workdir, Stdin: stdin != nil}, stdin, stdout, stderr)
	switch {
	case err == nil:
		return code, true, nil
	case errors.Is(err, agent.ErrGone) && !errors.Is(err, agent.ErrStarted):
		r.startAgent(ctx, sb, false)
		return 0, false, nil
	case errors.Is(err, agent.ErrTooLarge):
		return 0, false, nil // the engine takes a command line as long as the kernel does
	case ctx.Err() != nil:
		return -1, true, ctx.Err()
	default:
		return -1, true, fmt.Errorf("docker: exec: %w", err)
	}
}
