package pool

import (
	"context"
	"math"
	"sync"
	"time"
)

// startFill reports whether a refill of template name should start now: not while one runs,
// which runs once more when it ends instead (a burst of leases asks for one each).
func (s *supply) startFill(name string) bool {
	s.queue.Lock()
	defer s.queue.Unlock()
	if s.filling[name] > 0 {
		s.filling[name] = 2
		return false
	}
	s.filling[name] = 1
	return true
}

// fillAll runs fill for template name until no refill was asked for while the last one ran.
func (s *supply) fillAll(ctx context.Context, name string) {
	for {
		s.fill(ctx, name)
		s.queue.Lock()
		again := s.filling[name] == 2 && ctx.Err() == nil
		if again {
			s.filling[name] = 1
		} else {
			delete(s.filling, name)
		}
		s.queue.Unlock()
		if !again {
			return
		}
	}
}

// fill brings the template's pool to its target (see sizer) and the leases waiting for it:
// it starts the sandboxes missing (as many as max_total and the memory budget leave room for,
// at most RefillParallel being made at once), or, with no lease waiting, destroys the warm
// ones above the target.
func (s *supply) fill(ctx context.Context, name string) {
	pass := s.passes.fills[name]
	pass.begun.Add(1)
	defer pass.ended.Add(1)
	t := s.templates[name]
	if _, err := s.image(ctx, name); err != nil {
		return // noteImage said why
	}
	// The counts and the change to them go together (see hold): two refills at once, or one
	// beside a health check, cannot both see the same gap.
	s.counts.Lock()
	c, err := s.census(ctx, name, s.memoryBudget > 0)
	if err != nil {
		s.counts.Unlock()
		if ctx.Err() == nil { // a stopping node's store calls fail; that is no refill failure
			s.log.Error("pool refill", "template", name, "err", err)
		}
		return
	}
	s.queue.Lock()
	waiting := len(s.waiters[name])
	target := s.sizers[name].update(s.now(), c.leased[name], waiting)
	s.queue.Unlock()
	warm := c.warm[name]
	// No more than the engine makes at once is asked for: a creation queued behind the parallel
	// bound would hold room under max_total that a cold start could use meanwhile, and the
	// refill runs again every second and at every lease and release.
	need := min(target+waiting-warm-s.creating[name], s.roomLocked(t, c), s.parallel-s.creating[name])
	surplus := 0
	if waiting == 0 && s.creating[name] == 0 {
		surplus = warm - target
	}
	if need > 0 {
		s.creating[name] += need
	}
	s.counts.Unlock()
	for range surplus {
		sb, err := s.hold(ctx, name)
		if err != nil {
			break
		}
		s.settle(ctx, sb, false)
		s.metrics.shrank()
	}
	var wg sync.WaitGroup
	for range need {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed := func() { s.counts.Lock(); s.creating[name]--; s.counts.Unlock() }
			select {
			case s.sem <- struct{}{}:
			case <-ctx.Done():
				failed()
				return
			}
			defer func() { <-s.sem }()
			start := time.Now()
			sb, err := s.create(ctx, t)
			if err != nil {
				failed()
				if ctx.Err() == nil {
					s.log.Error("sandbox create failed", "template", name, "err", err)
				}
				return
			}
			// Checked before it is offered, so a lease never gets a sandbox that cannot work;
			// and not offered if its template was rebuilt while it was made.
			ok := true
			if err := s.runtime.Check(ctx, sb); err != nil {
				if ctx.Err() == nil { // a stopping node's checks are cut short; that is no failure
					s.log.Error("new sandbox failed its health check; destroyed", "template", name, "err", err)
					s.metrics.observeCreate(0, err)
				}
				ok = false
			}
			keep := ok && !s.stale(sb)
			if keep {
				took := time.Since(start)
				s.queue.Lock()
				s.sizers[name].created(took)
				s.queue.Unlock()
				s.log.Debug("sandbox warm", "template", name, "sandbox", sb.ID, "addr", sb.Addr, "took", took)
			}
			s.settle(ctx, sb, keep)
		}()
	}
	wg.Wait()
}

// census is what this node's pools hold: warm and leased sandboxes per template, from the
// store, and those pending for a lease (of every template when all, else of one).
type census struct{ warm, leased, pending map[string]int }

// census reads the counts; counts is held, so the supply's own changes to the warm set wait.
// The lease path changes the store and its two counters without it: a lease counts itself
// claimed before it takes a warm sandbox, and bound after its lease is recorded. The store's
// counts are one atomic read; bound is read before it and claimed after, so a sandbox between
// the warm set and its lease at that instant is claimed and not yet bound in what census saw,
// and pending (claimed - bound) never counts it short. It may count one twice for a moment,
// which makes the refill wait a second, never overfill.
func (s *supply) census(ctx context.Context, one string, all bool) (census, error) {
	c := census{warm: map[string]int{}, leased: map[string]int{}, pending: map[string]int{}}
	names := []string{one}
	if all {
		names = s.names
	}
	read := func(of map[string]int) []int {
		s.queue.Lock()
		defer s.queue.Unlock()
		out := make([]int, len(names))
		for i, name := range names {
			out[i] = of[name]
		}
		return out
	}
	bound := read(s.bound)
	warm, leased, err := s.warm.Counts(ctx, s.node, names)
	if err != nil {
		return c, err
	}
	claimed := read(s.claimed)
	for i, name := range names {
		c.warm[name], c.leased[name], c.pending[name] = warm[i], leased[i], claimed[i]-bound[i]
	}
	return c, nil
}

// roomLocked is how many more sandboxes of t this node may make now: what max_total leaves of
// the template's warm, leased, pending and creating sandboxes, and what the memory budget
// leaves of every template's together, less what the other templates still lack of their
// min_warm floors (one template's burst must not keep another below its floor). counts is
// held.
func (s *supply) roomLocked(t Template, c census) int {
	room := math.MaxInt
	if t.MaxTotal > 0 {
		room = t.MaxTotal - c.warm[t.Name] - c.leased[t.Name] - s.creating[t.Name] - c.pending[t.Name]
	}
	if budget := s.memoryBudget; budget > 0 && t.MemoryMB > 0 {
		var used int64
		for name, u := range s.templates {
			used += int64(c.warm[name]+c.leased[name]+s.creating[name]+c.pending[name]) * u.MemoryMB
			if short := u.MinWarm - c.warm[name] - s.creating[name]; name != t.Name && short > 0 {
				used += int64(short) * u.MemoryMB
			}
		}
		room = min(room, int((budget-used)/t.MemoryMB))
	}
	return max(room, 0)
}

// hold takes one warm sandbox of template name out of the warm set for a while (a health check,
// a drain) and counts it as one being created, so a refill meanwhile neither replaces it nor
// counts it twice: the warm set and the count change together, under counts, and a refill reads
// both under it too.
func (s *supply) hold(ctx context.Context, name string) (Sandbox, error) {
	s.counts.Lock()
	defer s.counts.Unlock()
	sb, err := s.warm.Claim(ctx, s.node, name)
	if err == nil {
		s.creating[name]++
	}
	return sb, err
}

// settle ends a hold, or a creation: sb goes to the lease that has waited longest for one of
// its template, else into the warm set, when keep (and registering it works); else it is
// forgotten and destroyed. Either way it stops counting as being created.
func (s *supply) settle(ctx context.Context, sb Sandbox, keep bool) {
	s.counts.Lock()
	s.creating[sb.Template]--
	if keep {
		keep = s.offer(ctx, sb)
	}
	s.counts.Unlock()
	if !keep {
		s.discard(ctx, sb)
	}
}

// discard forgets and destroys sb, a sandbox no lease will have, on a context that outlives
// its caller's.
func (s *supply) discard(ctx context.Context, sb Sandbox) {
	s.warm.Forget(ctx, sb)
	s.runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
}

// checkWarm checks every warm sandbox and replaces those that fail: each is taken out of the
// warm set first (so no lease can claim it meanwhile), checked, and put back only if healthy.
func (s *supply) checkWarm(ctx context.Context) {
	defer s.passes.checks.Add(1)
	for name, t := range s.templates {
		warm, err := s.warm.WarmCount(ctx, s.node, name)
		if err != nil {
			return
		}
		for range warm {
			if !s.checkOne(ctx, t) {
				break
			}
		}
		s.kick(name)
	}
}

// checkOne holds one warm sandbox of t out of the warm set, checks it, and puts it back if it
// is healthy or destroys it if not; it reports whether there was one to check.
func (s *supply) checkOne(ctx context.Context, t Template) bool {
	sb, err := s.hold(ctx, t.Name)
	if err != nil {
		return false
	}
	healthy := true
	if err := s.runtime.Check(ctx, sb); err != nil {
		s.log.Error("warm sandbox failed its health check; replacing it", "template", t.Name, "sandbox", sb.ID, "err", err)
		s.metrics.unhealthy()
		healthy = false
	}
	s.settle(ctx, sb, healthy)
	return true
}

// drain replaces the warm sandboxes of template name made from an image it no longer uses: each
// is held out of the warm set (so no lease claims it meanwhile) and destroyed, or put back.
func (s *supply) drain(ctx context.Context, name string) {
	warm, err := s.warm.WarmCount(ctx, s.node, name)
	if err != nil {
		return
	}
	for range warm {
		sb, err := s.hold(ctx, name)
		if err != nil {
			break
		}
		stale := s.stale(sb)
		s.settle(ctx, sb, !stale)
		if stale {
			s.metrics.drained()
		}
	}
	s.kick(name)
}
