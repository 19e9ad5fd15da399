package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
)

// ErrNoSuchProcess is what a process id the lease does not have is answered with.
var ErrNoSuchProcess = errors.New("no such process")

// Limits on background processes, per lease.
const (
	// MaxRunningProcesses is how many may run at once.
	MaxRunningProcesses = 16
	// KeptProcesses is how many are remembered, running or ended; the oldest ended one is
	// forgotten first.
	KeptProcesses = 32
	// ProcessOutputKept is how much of each of a process's streams is kept: the last bytes. A
	// lease holds at most KeptProcesses * 2 * ProcessOutputKept (16 MiB) of output.
	ProcessOutputKept = 256 << 10
)

// Events of a background process's exec records: its start, a signal sent to it, its end.
const (
	EventProcessStart  audit.Event = "process-start"
	EventProcessSignal audit.Event = "process-signal"
	EventProcessExit   audit.Event = "process-exit"
)

// Signals are the signals a background process may be sent.
var Signals = []string{"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"}

// ProcessInfo describes a background process of a lease.
type ProcessInfo = apitype.ProcessInfo

// ProcessOutput is what a process wrote from the offsets asked for.
type ProcessOutput struct {
	Stdout, Stderr []byte
	// StdoutOffset and StderrOffset are where the next read should start.
	StdoutOffset, StderrOffset int64
	// StdoutDropped and StderrDropped count bytes from the offsets asked for that are no longer
	// kept (only the last ProcessOutputKept of each stream are), skipped over.
	StdoutDropped, StderrDropped int64
	Process                      ProcessInfo
}

// process is one background process; its streams are written by the runtime's Exec.
type process struct {
	info           ProcessInfo
	marker         string
	cancel         context.CancelFunc
	stdout, stderr *outBuf
	done           chan struct{}
	input          *inputBuf     // nil: it takes no input
	resize         chan TermSize // a terminal's, until it ends; nil otherwise
	// pausing is set when a pause that keeps memory carries it (carried.go): its end here
	// is the agent's connection cut by the checkpoint, not its exit.
	pausing bool
}

// leaseProcesses are a lease's background processes, ended with it.
type leaseProcesses struct {
	byID  map[string]*process
	order []string
	ended bool
}

// outBuf keeps the last ProcessOutputKept bytes written, numbered by their offset in the
// stream, and wakes readers waiting for more. Until that much is written the bytes are a plain
// slice (offset o at buf[o]); from then on a ring of that size (offset o at buf[o % size]).
type outBuf struct {
	mu      sync.Mutex
	buf     []byte
	ring    bool
	total   int64 // bytes written in all; the last min(total, ProcessOutputKept) are kept
	changed chan struct{}
}

func newOutBuf() *outBuf { return &outBuf{changed: make(chan struct{})} }

func (b *outBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	const size = ProcessOutputKept
	if !b.ring && b.total+int64(len(p)) <= size {
		b.buf = append(b.buf, p...)
		b.total += int64(len(p))
	} else {
		if !b.ring {
			ring := make([]byte, size)
			copy(ring, b.buf) // offsets below size sit where the ring puts them
			b.buf, b.ring = ring, true
		}
		if len(p) > size {
			b.total += int64(len(p) - size)
			p = p[len(p)-size:]
		}
		for len(p) > 0 {
			k := copy(b.buf[b.total%size:], p)
			b.total += int64(k)
			p = p[k:]
		}
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return n, nil
}

// read returns what is kept from off (at most max bytes), the offset after it, and how many
// bytes from off were dropped; and a channel closed at the next write.
func (b *outBuf) read(off int64, max int) (data []byte, next, dropped int64, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	const size = ProcessOutputKept
	if start := b.total - min(b.total, size); off < start {
		dropped, off = start-off, start
	}
	off = min(off, b.total)
	end := min(b.total, off+int64(max))
	if !b.ring {
		return slices.Clone(b.buf[off:end]), end, dropped, b.changed
	}
	data = make([]byte, 0, end-off)
	for o := off; o < end; {
		at := o % size
		k := min(size-at, end-o)
		data = append(data, b.buf[at:at+k]...)
		o += k
	}
	return data, end, dropped, b.changed
}

func (b *outBuf) totalWritten() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// StartProcess starts req in tenant's lease id in the background and returns at once; it runs
// until it exits, its timeout (if any) passes, it is killed, or the lease ends. Its output is
// read with ProcessOutput, from any offset, by any caller of the tenant. With req.Stdin (or
// req.TTY) it reads what ProcessInput sends until CloseProcessInput; a terminal's is resized
// with ResizeProcess (req.Resize is ignored).
func (op *sandboxOps) StartProcess(ctx context.Context, tenant, id string, req ExecRequest) (ProcessInfo, error) {
	l, err := op.table.Held(ctx, tenant, id)
	if err != nil {
		return ProcessInfo{}, err
	}
	if len(req.Cmd) == 0 {
		return ProcessInfo{}, fmt.Errorf("%w: a process needs a command", ErrBadRequest)
	}
	if !time.Now().Before(l.Expires) {
		return ProcessInfo{}, fmt.Errorf("%w: lease %s has expired", ErrLeaseNotFound, id)
	}
	if req.Env, err = commandEnv(l, req.Env); err != nil {
		return ProcessInfo{}, err
	}
	p := &process{
		info: ProcessInfo{Cmd: req.Cmd, Started: time.Now().UTC(), Running: true, Workdir: req.Workdir,
			TTY: req.TTY, Stdin: req.Stdin || req.TTY},
		stdout: newOutBuf(), stderr: newOutBuf(), done: make(chan struct{}),
	}
	var stdin io.Reader
	if p.info.Stdin {
		p.input = newInputBuf()
		stdin = p.input
	}
	req.Resize = nil
	if req.TTY {
		resize := make(chan TermSize, 1)
		p.resize, req.Resize = resize, resize
	}
	op.procMu.Lock()
	lp := op.procs[l.ID]
	if lp == nil {
		lp = &leaseProcesses{byID: map[string]*process{}}
		op.procs[l.ID] = lp
	}
	// Ids are unique within the lease and never 0...0: a client may use the hex as a number.
	for p.info.ID == "" || lp.byID[p.info.ID] != nil || p.info.ID == "p-00000000" {
		var nonce [8]byte
		rand.Read(nonce[:])
		p.info.ID, p.marker = "p-"+hex.EncodeToString(nonce[:4]), hex.EncodeToString(nonce[:])
	}
	req.Marker = p.marker
	running := 0
	for _, q := range lp.byID {
		if q.info.Running {
			running++
		}
	}
	if lp.ended || running >= MaxRunningProcesses {
		op.procMu.Unlock()
		if lp.ended {
			return ProcessInfo{}, fmt.Errorf("%w: lease %s is ending", ErrLeaseNotFound, id)
		}
		return ProcessInfo{}, fmt.Errorf("%w: lease %s already runs %d background processes, the most it may; wait for one or kill it", ErrBadRequest, id, running)
	}
	// The process outlives the call that started it, not the lease.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	lp.byID[p.info.ID] = p
	lp.order = append(lp.order, p.info.ID)
	op.forgetEnded(lp)
	op.procMu.Unlock()

	op.processEvent(ctx, l, p, EventProcessStart, "")
	go func() {
		defer cancel()
		start := time.Now()
		tp := op.newTaps(stdin != nil)
		if stdin != nil {
			stdin = io.TeeReader(stdin, tp.in)
		}
		code, err := op.runtime.Exec(pctx, l.Sandbox, req, stdin, io.MultiWriter(p.stdout, tp.out), io.MultiWriter(p.stderr, tp.err))
		now := time.Now().UTC()
		if p.input != nil {
			p.input.close()
		}
		op.procMu.Lock()
		if p.resize != nil {
			close(p.resize)
			p.resize = nil
		}
		p.info.Running, p.info.Ended, p.info.Stdin = false, &now, false
		pausing := p.pausing
		if pausing {
			// Not an exit, whatever the exec said: the pause cut the node's hold on it.
			err = errors.New("its lease paused with its memory, which cut the node's hold on it: it runs on in the pause, " +
				"and is listed again as " + p.info.ID + " after the resume")
		}
		if err != nil {
			p.info.Error = err.Error()
		} else {
			p.info.ExitCode = &code
		}
		op.procMu.Unlock()
		reason := ""
		if err != nil {
			reason = err.Error()
		}
		took := time.Since(start)
		// The end is recorded before anyone learns of it: a release waiting for its processes
		// (endProcesses) writes its own records after this one.
		op.processRecord(context.WithoutCancel(ctx), l, p, EventProcessExit, reason, func(info ProcessInfo, rec *audit.Record) {
			if err == nil {
				rec.ExitCode = &code
			}
			rec.BytesDown, rec.DurationMS = info.StdoutBytes+info.StderrBytes, float64(took.Microseconds())/1000
			tp.fill(op, l.ID, rec)
		})
		close(p.done)
		// Wake readers waiting on either stream.
		p.stdout.Write(nil)
		p.stderr.Write(nil)
	}()
	return op.snapshot(p), nil
}

// MaxProcessInput bounds the input a process has been sent and not read yet.
const MaxProcessInput = 1 << 20

// inputBuf is a background process's input: what was sent and not read yet, then the end once
// closed. Sending never waits on the process; it is refused when the process is not reading.
type inputBuf struct {
	mu     sync.Mutex
	more   *sync.Cond
	buf    []byte
	closed bool
}

func newInputBuf() *inputBuf {
	b := &inputBuf{}
	b.more = sync.NewCond(&b.mu)
	return b
}

func (b *inputBuf) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.buf) == 0 && !b.closed {
		b.more.Wait()
	}
	if len(b.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

func (b *inputBuf) write(pid string, p []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("%w: the input of process %s is closed", ErrBadRequest, pid)
	case len(b.buf)+len(p) > MaxProcessInput:
		return fmt.Errorf("%w: process %s has %d bytes of input it has not read; it takes at most %d more", ErrBadRequest, pid, len(b.buf), MaxProcessInput-len(b.buf))
	}
	b.buf = append(b.buf, p...)
	b.more.Broadcast()
	return nil
}

func (b *inputBuf) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.more.Broadcast()
}

// forgetEnded drops the oldest ended processes beyond KeptProcesses. Call with procMu held.
func (op *sandboxOps) forgetEnded(lp *leaseProcesses) {
	for i := 0; len(lp.order) > KeptProcesses && i < len(lp.order); {
		if p := lp.byID[lp.order[i]]; !p.info.Running {
			delete(lp.byID, lp.order[i])
			lp.order = slices.Delete(lp.order, i, i+1)
			continue
		}
		i++
	}
}

// Processes lists tenant's lease id's background processes, oldest first.
func (op *sandboxOps) Processes(ctx context.Context, tenant, id string) ([]ProcessInfo, error) {
	l, err := op.table.Held(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	op.procMu.Lock()
	defer op.procMu.Unlock()
	out := []ProcessInfo{}
	if lp := op.procs[l.ID]; lp != nil {
		for _, pid := range lp.order {
			out = append(out, op.snapshotLocked(lp.byID[pid]))
		}
	}
	return out, nil
}

// ProcessOutput returns what process pid of tenant's lease id wrote from the offsets given (at
// most max bytes of each stream), waiting up to wait for something new when there is nothing
// yet and it still runs.
func (op *sandboxOps) ProcessOutput(ctx context.Context, tenant, id, pid string, stdoutOff, stderrOff int64, max int, wait time.Duration) (ProcessOutput, error) {
	p, err := op.process(ctx, tenant, id, pid)
	if err != nil {
		return ProcessOutput{}, err
	}
	if max <= 0 || max > ProcessOutputKept {
		max = ProcessOutputKept
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		var o ProcessOutput
		var outCh, errCh <-chan struct{}
		o.Stdout, o.StdoutOffset, o.StdoutDropped, outCh = p.stdout.read(stdoutOff, max)
		o.Stderr, o.StderrOffset, o.StderrDropped, errCh = p.stderr.read(stderrOff, max)
		o.Process = op.snapshot(p)
		if len(o.Stdout) > 0 || len(o.Stderr) > 0 || !o.Process.Running || wait <= 0 {
			return o, nil
		}
		select {
		case <-outCh:
		case <-errCh:
		case <-p.done:
		case <-deadline.C:
			return o, nil
		case <-ctx.Done():
			return o, ctx.Err()
		}
	}
}

// WaitProcess waits up to timeout for process pid of tenant's lease id to end, and describes it.
func (op *sandboxOps) WaitProcess(ctx context.Context, tenant, id, pid string, timeout time.Duration) (ProcessInfo, error) {
	p, err := op.process(ctx, tenant, id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
		return op.snapshot(p), ctx.Err()
	}
	return op.snapshot(p), nil
}

// SignalProcess sends sig (one of Signals) to process pid of tenant's lease id and everything
// it started.
func (op *sandboxOps) SignalProcess(ctx context.Context, tenant, id, pid, sig string) error {
	if !slices.Contains(Signals, sig) {
		return fmt.Errorf("%w: signal %q is not one of %v", ErrBadRequest, sig, Signals)
	}
	l, err := op.table.Held(ctx, tenant, id)
	if err != nil {
		return err
	}
	p, err := op.process(ctx, tenant, id, pid)
	if err != nil {
		return err
	}
	if !op.snapshot(p).Running {
		return fmt.Errorf("%w: process %s has ended", ErrBadRequest, pid)
	}
	err = op.runtime.Signal(ctx, l.Sandbox, p.marker, sig)
	op.processEvent(ctx, l, p, EventProcessSignal, sig)
	return err
}

// ProcessInput sends data to the input of process pid of tenant's lease id (its stdin, or what
// is typed on its terminal). What the process has not read yet is held, up to MaxProcessInput
// bytes; more is refused until it reads.
func (op *sandboxOps) ProcessInput(ctx context.Context, tenant, id, pid string, data []byte) error {
	p, err := op.process(ctx, tenant, id, pid)
	if err != nil {
		return err
	}
	if p.input == nil {
		return fmt.Errorf("%w: process %s takes no input (start it with stdin, or on a terminal)", ErrBadRequest, pid)
	}
	return p.input.write(pid, data)
}

// CloseProcessInput ends the input of process pid of tenant's lease id: once it has read what
// was sent, it reads the end of its stdin.
func (op *sandboxOps) CloseProcessInput(ctx context.Context, tenant, id, pid string) error {
	p, err := op.process(ctx, tenant, id, pid)
	if err != nil {
		return err
	}
	if p.input == nil {
		return fmt.Errorf("%w: process %s takes no input (start it with stdin, or on a terminal)", ErrBadRequest, pid)
	}
	p.input.close()
	op.procMu.Lock()
	p.info.Stdin = false
	op.procMu.Unlock()
	return nil
}

// ResizeProcess resizes the terminal process pid of tenant's lease id runs on.
func (op *sandboxOps) ResizeProcess(ctx context.Context, tenant, id, pid string, size TermSize) error {
	p, err := op.process(ctx, tenant, id, pid)
	if err != nil {
		return err
	}
	if size.Rows == 0 || size.Cols == 0 {
		return fmt.Errorf("%w: a terminal needs at least one row and one column", ErrBadRequest)
	}
	op.procMu.Lock()
	defer op.procMu.Unlock()
	switch {
	case !p.info.TTY:
		return fmt.Errorf("%w: process %s does not run on a terminal", ErrBadRequest, pid)
	case p.resize == nil:
		return fmt.Errorf("%w: process %s has ended", ErrBadRequest, pid)
	}
	// Only the newest size matters: one still waiting is replaced.
	select {
	case p.resize <- size:
	default:
		select {
		case <-p.resize:
		default:
		}
		select {
		case p.resize <- size:
		default:
		}
	}
	return nil
}

func (op *sandboxOps) process(ctx context.Context, tenant, id, pid string) (*process, error) {
	l, err := op.table.Held(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	op.procMu.Lock()
	defer op.procMu.Unlock()
	if lp := op.procs[l.ID]; lp != nil {
		if p := lp.byID[pid]; p != nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: lease %s has no process %s", ErrNoSuchProcess, id, pid)
}

// endProcesses stops lease's background processes and forgets them; it returns once each has
// ended (its sandbox is destroyed next anyway).
func (op *sandboxOps) endProcesses(lease string) {
	op.procMu.Lock()
	lp := op.procs[lease]
	delete(op.procs, lease)
	if lp != nil {
		lp.ended = true
	}
	op.procMu.Unlock()
	if lp == nil {
		return
	}
	for _, p := range lp.byID {
		p.cancel()
	}
	for _, p := range lp.byID {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
		}
	}
}

func (op *sandboxOps) snapshot(p *process) ProcessInfo {
	op.procMu.Lock()
	defer op.procMu.Unlock()
	return op.snapshotLocked(p)
}

func (op *sandboxOps) snapshotLocked(p *process) ProcessInfo {
	info := p.info
	info.Cmd = slices.Clone(p.info.Cmd)
	info.StdoutBytes, info.StderrBytes = p.stdout.totalWritten(), p.stderr.totalWritten()
	return info
}

// processEvent records a background process starting, being signalled or ending, as an exec
// record of the lease.
func (op *sandboxOps) processEvent(ctx context.Context, l Lease, p *process, event audit.Event, reason string) {
	op.processRecord(ctx, l, p, event, reason, nil)
}

// processRecord is processEvent with the record filled further by fill (nil: not).
func (op *sandboxOps) processRecord(ctx context.Context, l Lease, p *process, event audit.Event, reason string, fill func(info ProcessInfo, rec *audit.Record)) {
	info := op.snapshot(p)
	rec := audit.Record{
		Kind: audit.KindExec, Event: event, Node: op.node, Tenant: l.Tenant, Lease: l.ID, Task: l.Task,
		Sandbox: l.Sandbox.ID, Command: info.Cmd, Reason: reason, Process: info.ID,
	}
	if fill != nil {
		fill(info, &rec)
	}
	if err := op.audit.Write(ctx, rec); err != nil {
		op.log.Error("audit write failed", "err", err)
	}
}
