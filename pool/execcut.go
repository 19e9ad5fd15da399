package pool

import (
	"context"
	"errors"
)

// errLeaseEnded is the cause a command under way gets when its lease ends (cutExecs).
var errLeaseEnded = errors.New("the lease ended")

// execFor registers a command about to run in lease id and returns its context, cancelled when
// the lease's end begins (cutExecs), and the function that ends the registration. It is called
// before the lease is looked up, so an end that begins after the lookup finds the command.
func (op *sandboxOps) execFor(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	key := new(int)
	op.procMu.Lock()
	if op.execs == nil {
		op.execs = map[string]map[*int]context.CancelCauseFunc{}
	}
	if op.execs[id] == nil {
		op.execs[id] = map[*int]context.CancelCauseFunc{}
	}
	op.execs[id][key] = cancel
	op.procMu.Unlock()
	return ctx, func() {
		op.procMu.Lock()
		delete(op.execs[id], key)
		if len(op.execs[id]) == 0 {
			delete(op.execs, id)
		}
		op.procMu.Unlock()
		cancel(nil)
	}
}

// cutExecs ends the commands under way in lease id (their process groups are killed, as at a
// caller's cancellation), as its end begins: a release answers before its sandbox is destroyed,
// and an exec started before it (an interactive shell) must not go on taking input into the
// released sandbox, nor streaming what it does, until then.
func (op *sandboxOps) cutExecs(id string) {
	op.procMu.Lock()
	cs := op.execs[id]
	delete(op.execs, id)
	op.procMu.Unlock()
	for _, cancel := range cs {
		cancel(errLeaseEnded)
	}
}
