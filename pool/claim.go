package pool

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// claim takes a sandbox of t for a lease: a warm one; when there is none, as the template's
// on_empty says, it waits for the first to become warm (leases served in the order they
// came), then starts one or refuses (after_wait), or starts one at once, or refuses at once.
// It reports which happened. The sandbox stays counted as pending
// until the caller calls unclaim.
func (s *supply) claim(ctx context.Context, t Template, local bool) (Sandbox, Start, error) {
	now := time.Now()
	s.queue.Lock()
	s.sizers[t.Name].leased(s.now())
	queued := len(s.waiters[t.Name]) > 0
	s.claimed[t.Name]++
	s.queue.Unlock()
	if !queued { // a lease that came later does not pass one that waits
		sb, err := s.claimFresh(ctx, t, local)
		if err == nil {
			s.kick(t.Name)
			s.metrics.started(StartWarm, 0)
			return sb, StartWarm, nil
		}
		if !errors.Is(err, ErrNoWarm) {
			s.unclaim(ctx, t, nil)
			return Sandbox{}, "", err
		}
	}
	s.unclaim(ctx, t, nil)
	// Whatever on_empty says, this lease found nothing warm: the target rises for it.
	s.queue.Lock()
	s.sizers[t.Name].waited(s.now(), len(s.waiters[t.Name])+1)
	s.queue.Unlock()
	switch t.OnEmpty {
	case OnEmptyRefuse:
		s.kick(t.Name)
		return Sandbox{}, "", fmt.Errorf("%w: template %q had no warm sandbox and refuses a lease then (on_empty: refuse; its pool: min_warm %d, max_warm %d)",
			ErrNoWarm, t.Name, t.MinWarm, t.WarmCeiling())
	case OnEmptyCold:
		s.kick(t.Name)
		return s.coldStart(ctx, t, now)
	}
	wait := t.WaitFor
	if wait <= 0 {
		wait = 10 * time.Second
	}
	sb, err := s.await(ctx, t, wait, local)
	switch {
	case err == nil:
		s.metrics.started(StartWaited, time.Since(now))
		return sb, StartWaited, nil
	case !errors.Is(err, ErrNoWarm) || t.AfterWait == AfterWaitRefuse:
		return Sandbox{}, "", err
	}
	return s.coldStart(ctx, t, now)
}

// claimFresh is claimAnywhere, destroying what it takes that was made from an image its template
// no longer uses (a rebuild the drain has not reached yet).
func (s *supply) claimFresh(ctx context.Context, t Template, local bool) (Sandbox, error) {
	for {
		sb, err := s.claimAnywhere(ctx, t, local)
		if err != nil || !s.stale(sb) {
			return sb, err
		}
		s.warm.Forget(ctx, sb)
		go s.runtime.Destroy(context.WithoutCancel(ctx), sb.ID) // the lease does not wait for it
		s.metrics.drained()
	}
}

// claimAnywhere takes a warm sandbox of t from this node, else (unless local) from another live
// node (whose gateway and resolver then serve it: the binding goes to that node). A lease that
// acts in its sandbox before it is bound (a restore) is local: this node's runtime reaches only
// its own sandboxes.
func (s *supply) claimAnywhere(ctx context.Context, t Template, local bool) (Sandbox, error) {
	sb, err := s.warm.Claim(ctx, s.node, t.Name)
	if err == nil || !errors.Is(err, ErrNoWarm) || s.api == "" || local {
		return sb, err
	}
	nodes, nerr := s.nodes.Nodes(ctx)
	if nerr != nil {
		return Sandbox{}, err
	}
	for node := range nodes {
		if node == s.node {
			continue
		}
		if sb, oerr := s.warm.Claim(ctx, node, t.Name); oerr == nil {
			return sb, nil
		}
	}
	return Sandbox{}, err
}

// await queues a lease for a sandbox of t and waits, at most wait, for the refill (or another
// node's warm set) to give it one; the sandbox it returns is counted as pending.
func (s *supply) await(ctx context.Context, t Template, wait time.Duration, local bool) (Sandbox, error) {
	w := &waiter{ch: make(chan Sandbox, 1)}
	s.queue.Lock()
	s.waiters[t.Name] = append(s.waiters[t.Name], w)
	s.queue.Unlock()
	s.kick(t.Name)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// The queue is served by this node's refill; a sandbox put in the warm set beside it (one
	// offered as this lease began to wait, or by another node) is looked for every 100 ms by
	// the oldest waiter, one store call.
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case sb := <-w.ch:
			return sb, nil
		case <-poll.C:
			if !s.oldest(t.Name, w) {
				continue
			}
			s.reserve(t)
			sb, err := s.claimFresh(ctx, t, local)
			if err != nil {
				s.unclaim(ctx, t, nil)
				continue
			}
			if handed, ok := s.leave(t.Name, w); ok {
				s.unclaim(ctx, t, &handed) // two for one lease: the one handed goes on
			}
			return sb, nil
		case <-timer.C:
			if sb, ok := s.leave(t.Name, w); ok {
				return sb, nil
			}
			return Sandbox{}, fmt.Errorf("%w: template %q had no warm sandbox within %s (min_warm %d, max_warm %d, max_total %d)",
				ErrNoWarm, t.Name, wait, t.MinWarm, t.WarmCeiling(), t.MaxTotal)
		case <-ctx.Done():
			if sb, ok := s.leave(t.Name, w); ok {
				s.unclaim(ctx, t, &sb)
			}
			return Sandbox{}, ctx.Err()
		}
	}
}

// waiter is a lease waiting for a sandbox: settle hands it one on ch.
type waiter struct {
	ch chan Sandbox
}

// oldest reports whether w is the first of template's waiting leases.
func (s *supply) oldest(template string, w *waiter) bool {
	s.queue.Lock()
	defer s.queue.Unlock()
	q := s.waiters[template]
	return len(q) > 0 && q[0] == w
}

// leave takes w out of template's queue. A sandbox handed to it meanwhile is returned, still
// counted as pending, for the caller to use or give back (unclaim).
func (s *supply) leave(template string, w *waiter) (Sandbox, bool) {
	s.queue.Lock()
	defer s.queue.Unlock()
	q := s.waiters[template]
	for i := range q {
		if q[i] == w {
			s.waiters[template] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	select {
	case sb := <-w.ch:
		return sb, true
	default:
		return Sandbox{}, false
	}
}

// reserve counts one sandbox of t as pending for a lease, before the lease claims or starts
// it, so a refill meanwhile cannot take its room under max_total or the memory budget;
// unclaim ends that.
func (s *supply) reserve(t Template) {
	s.queue.Lock()
	s.claimed[t.Name]++
	s.queue.Unlock()
}

// unclaim ends a reservation (the lease bound its sandbox, or has none); with sb, a sandbox
// claimed for a lease that will not use it, that sandbox goes back to the warm set or the
// oldest waiting lease.
func (s *supply) unclaim(ctx context.Context, t Template, sb *Sandbox) {
	ctx = context.WithoutCancel(ctx) // a lease whose caller went away gives its sandbox back all the same
	s.queue.Lock()
	s.bound[t.Name]++
	s.queue.Unlock()
	if sb == nil {
		return
	}
	if !s.offer(ctx, *sb) {
		s.discard(ctx, *sb)
	}
}

// offer gives sb, a checked sandbox no lease holds, to the oldest waiting lease of its
// template (counted then as pending until that lease binds it), or else puts it in the warm
// set; it reports false if neither worked (then the caller destroys it). The store call is made
// outside the queue's lock, which the lease path takes: a lease that begins to wait while sb
// goes into the warm set finds it at its next look (see await).
func (s *supply) offer(ctx context.Context, sb Sandbox) bool {
	s.queue.Lock()
	if q := s.waiters[sb.Template]; len(q) > 0 {
		q[0].ch <- sb // buffered, and each waiter is handed one sandbox at most
		s.waiters[sb.Template] = q[1:]
		s.claimed[sb.Template]++
		s.queue.Unlock()
		return true
	}
	s.queue.Unlock()
	if err := s.warm.AddWarm(ctx, sb); err != nil {
		s.log.Error("sandbox registration failed", "template", sb.Template, "err", err)
		return false
	}
	return true
}

// coldStart starts a sandbox of t for one lease, if max_total and the memory budget leave
// room for it; it is counted as pending from the start.
func (s *supply) coldStart(ctx context.Context, t Template, asked time.Time) (Sandbox, Start, error) {
	s.counts.Lock()
	c, err := s.census(ctx, t.Name, s.memoryBudget > 0)
	room := 0
	if err == nil {
		if room = s.roomLocked(t, c); room > 0 {
			s.reserve(t)
		}
	}
	s.counts.Unlock()
	switch {
	case err != nil:
		return Sandbox{}, "", err
	case room == 0:
		return Sandbox{}, "", fmt.Errorf("%w: template %q has no warm sandbox and no room for another: it is at its max_total of %d sandboxes or the node's memory budget",
			ErrNoWarm, t.Name, t.MaxTotal)
	}
	sb, err := s.create(ctx, t)
	if err != nil {
		s.unclaim(ctx, t, nil)
		return Sandbox{}, "", fmt.Errorf("cold start of template %q failed: %w", t.Name, err)
	}
	s.metrics.started(StartCold, time.Since(asked))
	return sb, StartCold, nil
}
