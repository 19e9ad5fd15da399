package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// startFailed records why Run could not start, for the leases that wait for it.
func (tb *leaseTable) startFailed(err error) {
	tb.startErr = err
	close(tb.started)
}

// awaitStart waits until Run has started the node (or ctx ends).
func (tb *leaseTable) awaitStart(ctx context.Context) error {
	select {
	case <-tb.started:
	default:
		tb.startWaiters.Add(1)
		defer tb.startWaiters.Add(-1)
		select {
		case <-tb.started:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the node to start: %w", ctx.Err())
		}
	}
	if tb.startErr != nil {
		return fmt.Errorf("%w: the node did not start: %v", ErrNoWarm, tb.startErr)
	}
	return nil
}

// Reconcile makes the runtime and the store agree after a restart: warm sandboxes that still run
// are adopted, leases that are live and whose sandbox runs are kept, expired leases are ended,
// records whose sandbox is gone are dropped, and sandboxes nothing refers to are destroyed.
func (tb *leaseTable) Reconcile(ctx context.Context) error {
	sbs, err := tb.runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	running := map[string]Sandbox{}
	for _, sb := range sbs {
		running[sb.ID] = sb
	}
	keep := map[string]bool{}
	warm, err := tb.supply.warm.ListWarm(ctx, tb.node)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, sb := range warm {
		if _, ok := running[sb.ID]; ok {
			keep[sb.ID] = true
			continue
		}
		if err := tb.supply.warm.Forget(ctx, sb); err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
	}
	leases, err := tb.leases.ListLeases(ctx, tb.node)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	now := time.Now()
	for _, l := range leases {
		_, ok := running[l.Sandbox.ID]
		switch {
		case ok && now.Before(l.Expires):
			keep[l.Sandbox.ID] = true
		case ok:
			keep[l.Sandbox.ID] = true // its end destroys it, before the start goes on
			if err := tb.endAs(ctx, l, audit.EventExpiry, "", true); err != nil && !errors.Is(err, ErrLeaseNotFound) {
				return fmt.Errorf("reconcile: %w", err)
			}
		default:
			tb.unbindLocal(l)
			err := tb.leases.Unbind(ctx, l)
			if errors.Is(err, ErrLeaseNotFound) {
				continue // ended since it was listed
			}
			if err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			tb.event(ctx, l, audit.EventReap, "its sandbox was gone when the node restarted")
		}
	}
	for id := range running {
		if !keep[id] {
			tb.log.Info("destroying a sandbox no record refers to", "sandbox", id)
			if err := tb.runtime.Destroy(ctx, id); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
		}
	}
	return nil
}

// Cleanup destroys every sandbox of this node and drops its pool records. Sandboxes go first
// and every step runs even when another failed: with the store down, the containers must still go.
func (tb *leaseTable) Cleanup(ctx context.Context) error {
	var errs []error
	sbs, err := tb.runtime.List(ctx)
	errs = append(errs, err)
	for _, sb := range sbs {
		errs = append(errs, tb.runtime.Destroy(ctx, sb.ID))
	}
	leases, err := tb.leases.ListLeases(ctx, tb.node)
	errs = append(errs, err)
	for _, l := range leases {
		tb.unbindLocal(l)
		if err := tb.leases.Unbind(ctx, l); !errors.Is(err, ErrLeaseNotFound) {
			errs = append(errs, err)
		}
		if reason := tb.revocation(ctx, tb.release, l); reason != "" {
			errs = append(errs, errors.New(reason))
		}
	}
	warm, err := tb.supply.warm.ListWarm(ctx, tb.node)
	errs = append(errs, err)
	for _, sb := range warm {
		errs = append(errs, tb.supply.warm.Forget(ctx, sb))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pool cleanup: %w", err)
	}
	return nil
}
