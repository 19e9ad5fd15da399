package pool

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/pool/inside"
)

// WithPolicy returns rt with the exec policy every backend shares, written here once over the
// Runtime interface so that no backend writes it again:
//
//   - every command is given a fresh Marker when it has none (one it has is kept), so that its
//     processes, and what they start, can be found from inside the sandbox: to kill them, and
//     to resize a terminal (FollowResize);
//   - it runs for at most its Timeout;
//   - when the Timeout passes, or ctx ends, before the command has ended, every process
//     carrying its marker is sent KILL through rt.Signal (under a context the caller's end
//     does not cut short), and Exec fails with ErrTimedOut ("command timed out after 1s and
//     was killed"), or with ctx's error when the caller gave up.
//
// rt's own Exec does only what is its backend's: it runs the command in the sandbox, marking
// its processes with req.Marker when it is set, until the command ends or ctx does. Its other
// methods are rt's, unchanged. The Manager applies the policy to its runtime; anything else
// that runs commands through a backend directly and wants a timeout applies it too (a
// backend's health check does, through Probe). WithPolicy of a runtime it returned is that
// runtime, so the policy is never applied twice. Safe for concurrent use when rt is.
func WithPolicy(rt Runtime) Runtime {
	if p, ok := rt.(policed); ok {
		return p
	}
	return policed{rt}
}

// policed is a Runtime under the exec policy (WithPolicy).
type policed struct{ Runtime }

var _ Runtime = policed{}

// Exec runs req through the runtime under the policy (WithPolicy).
func (p policed) Exec(ctx context.Context, sb Sandbox, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	// A command cut off is killed with what it started: the marker finds them from inside the
	// sandbox, where the host cannot see (gVisor's processes are not in the host's /proc, and
	// a Kubernetes node agent sees no container's). Every command has one, since any may be cut
	// off by its caller going away, not only by its timeout. A terminal is resized by it too.
	if req.Marker == "" {
		req.Marker = inside.NewMarker()
	}
	runCtx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	code, err := p.Runtime.Exec(runCtx, sb, req, stdin, stdout, stderr)
	// A command that ended on its own as the time ran out has ended: its exit code stands.
	if err == nil || runCtx.Err() == nil {
		return code, err
	}
	if req.Marker != "" {
		// Best effort, as the command is gone either way for its caller: what the marker does
		// not find (a process that cleared its environment) is left to the lease's end.
		p.Runtime.Signal(context.WithoutCancel(ctx), sb, req.Marker, "KILL")
	}
	if ctx.Err() == nil {
		return -1, fmt.Errorf("%w after %s and was killed", ErrTimedOut, req.Timeout)
	}
	return -1, ctx.Err()
}

// resizeTimeout bounds one resize of a terminal (FollowResize); resizeWait how long a size sent
// before the terminal exists is tried again, until it does.
const (
	resizeTimeout = 10 * time.Second
	resizeWait    = 5 * time.Second
)

// FollowResize sets the terminal of the command marked marker in sb (inside.OnTerminal's,
// made inside the sandbox) to each size sent on sizes, until sizes is closed: a backend's Exec
// runs it beside a command on a terminal (ExecRequest.TTY and Resize). Each resize is a command
// of its own (inside.ResizeCmd) run through rt.Exec as the sandbox user, within 10 seconds;
// its failure is not reported (the terminal keeps its size). A size sent before the command's
// terminal exists (a client that resizes as it starts one) is tried again, ever less often, for
// up to 5 seconds, or until a newer size replaces it. With no marker there is nothing to find:
// sizes are read and dropped, so a sender never blocks.
func FollowResize(ctx context.Context, rt Runtime, sb Sandbox, marker string, sizes <-chan TermSize) {
	for sz := range sizes {
		if marker == "" {
			continue
		}
		deadline := time.Now().Add(resizeWait)
		next := sizes // nil once sizes has ended: the size in hand is still tried
		for pause := 10 * time.Millisecond; !resize(ctx, rt, sb, marker, sz) && time.Now().Before(deadline); pause = min(2*pause, 200*time.Millisecond) {
			timer := time.NewTimer(pause)
			select {
			case newer, ok := <-next:
				if ok {
					sz = newer
				} else {
					next = nil
				}
			case <-timer.C:
			}
			timer.Stop()
		}
		if next == nil {
			return
		}
	}
}

// resize sets the terminal of the command marked marker in sb to sz, and reports false only
// when it has no terminal yet (inside.ResizeNoTerminal): any other outcome is final.
func resize(ctx context.Context, rt Runtime, sb Sandbox, marker string, sz TermSize) bool {
	rctx, cancel := context.WithTimeout(ctx, resizeTimeout)
	defer cancel()
	code, err := rt.Exec(rctx, sb, ExecRequest{Cmd: inside.ResizeCmd(marker, sz.Rows, sz.Cols)}, nil, io.Discard, io.Discard)
	return err != nil || code != inside.ResizeNoTerminal
}

// ProbeTimeout bounds a health probe (Probe).
const ProbeTimeout = 5 * time.Second

// Probe runs the health probe cmd (inside.ProbeCmd, for the backend's gateway and resolver) in
// sb through rt under the exec policy (WithPolicy), within ProbeTimeout: what a backend's Check
// does. Its error names sb as name (the backend's own short form of its id) and says whether
// the probe could not run (wrapping why: ErrTimedOut, the backend's error) or ran and failed,
// with what it wrote to stderr; the backend adds its own prefix ("docker: ").
func Probe(ctx context.Context, rt Runtime, sb Sandbox, name string, cmd []string) error {
	var stderr strings.Builder
	code, err := WithPolicy(rt).Exec(ctx, sb, ExecRequest{Cmd: cmd, Timeout: ProbeTimeout}, nil, io.Discard, &stderr)
	if err != nil {
		return fmt.Errorf("health probe in %s: %w", name, err)
	}
	if code != 0 {
		return fmt.Errorf("sandbox %s cannot reach the gateway and resolver: %s", name, strings.TrimSpace(stderr.String()))
	}
	return nil
}
