package pool

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// sandboxOps acts inside the sandboxes of the leases this node holds: commands (Exec), background
// processes (process.go), file transfers (transfer.go), workspace operations (files.go), and the
// ledger that records each (ledger.go). procMu guards procs and uploads; it is the only lock.
type sandboxOps struct {
	node      string
	templates map[string]Template
	runtime   Runtime
	audit     audit.Sink
	table     *leaseTable // Held: every operation acts on a lease this node holds
	// outputHead and redact are Config.OutputHead and Config.Redact.
	outputHead int
	redact     func(lease, text string) string
	log        *slog.Logger

	procMu  sync.Mutex
	procs   map[string]*leaseProcesses     // per lease id: its background processes
	uploads map[string]map[string]FileInfo // per lease id: the files the tenant put there, by path
	// recorded holds the sandboxes whose workspace was recorded before their lease's end
	// (recordBefore), which ended does not record again.
	recorded map[string]bool
	// execs are the commands under way, per lease id, which its end cuts (execcut.go).
	execs map[string]map[*int]context.CancelCauseFunc
}

// ended stops l's background processes and records what its workspace holds, as its lease ends.
func (op *sandboxOps) ended(ctx context.Context, l Lease) {
	op.endProcesses(l.ID)
	op.procMu.Lock()
	done := op.recorded[l.Sandbox.ID]
	delete(op.recorded, l.Sandbox.ID)
	op.procMu.Unlock()
	if !done {
		op.recordWorkspace(ctx, l)
	}
}

// recordBefore records what l's workspace holds now, for an end that will not find the sandbox
// able to tell (a pause that checkpoints it stops it first); ended then does not record it,
// unless undo is called (the end did not come: the lease runs on).
func (op *sandboxOps) recordBefore(ctx context.Context, l Lease) (undo func()) {
	op.recordWorkspace(ctx, l)
	op.procMu.Lock()
	if op.recorded == nil {
		op.recorded = map[string]bool{}
	}
	op.recorded[l.Sandbox.ID] = true
	op.procMu.Unlock()
	return func() {
		op.procMu.Lock()
		delete(op.recorded, l.Sandbox.ID)
		op.procMu.Unlock()
	}
}

// Exec runs req in tenant's lease id.
func (op *sandboxOps) Exec(ctx context.Context, tenant, id string, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	runCtx, done := op.execFor(ctx, id)
	defer done()
	l, err := op.table.Held(ctx, tenant, id)
	if err != nil {
		return -1, err
	}
	if len(req.Cmd) == 0 {
		return -1, fmt.Errorf("%w: exec needs a command", ErrBadRequest)
	}
	if !time.Now().Before(l.Expires) {
		return -1, fmt.Errorf("%w: lease %s has expired", ErrLeaseNotFound, id)
	}
	if req.Env, err = commandEnv(l, req.Env); err != nil {
		return -1, err
	}
	start := time.Now()
	tp := op.newTaps(stdin != nil)
	if stdin != nil {
		stdin = io.TeeReader(stdin, tp.in)
	}
	out, errOut := &countWriter{w: io.MultiWriter(stdout, tp.out)}, &countWriter{w: io.MultiWriter(stderr, tp.err)}
	code, err := op.runtime.Exec(runCtx, l.Sandbox, req, stdin, out, errOut)
	if err != nil && context.Cause(runCtx) == errLeaseEnded {
		err = fmt.Errorf("%w: lease %s ended while the command ran", ErrLeaseNotFound, id)
	}
	rec := audit.Record{
		Kind: audit.KindExec, Node: op.node, Tenant: l.Tenant, Lease: l.ID, Task: l.Task,
		Sandbox: l.Sandbox.ID, Command: req.Cmd, ExitCode: &code, BytesDown: out.n + errOut.n,
		DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	}
	tp.fill(op, l.ID, &rec)
	if err != nil {
		rec.Reason = err.Error()
	}
	if aerr := op.audit.Write(ctx, rec); aerr != nil {
		op.log.Error("audit write failed", "err", aerr)
	}
	return code, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
