package pool

import (
	"slices"
	"testing"
	"time"
)

// TestSizerThroughABurstAndIdle drives one template's sizer on a clock of its own: a quiet
// pool at its floor, a burst of 16 clients whose leases wait, a minute of steady leasing at
// the rate the engine keeps up with, and then an idle period, asserting the target it picks at
// each step.
func TestSizerThroughABurstAndIdle(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	s := newSizer(2, 16)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	want := func(now time.Time, held, waiting, n int, why string) {
		t.Helper()
		if got := s.update(now, held, waiting); got != n {
			t.Fatalf("at +%s (%s): target %d, want %d (rate %.2f/s, create %s, peak %d)", now.Sub(t0), why, got, n, s.rate(now), s.create, s.peak(now))
		}
	}
	for range 4 {
		s.created(800 * time.Millisecond)
	}
	if s.create != 800*time.Millisecond {
		t.Fatalf("create time %s after four of 800ms", s.create)
	}
	want(at(0), 0, 0, 2, "nothing leased yet: the floor")

	// A lease every 10 s: 0.1/s for 0.8 s is 0.08 in flight, which rounds up to one, below
	// the floor.
	for i := range 6 {
		s.leased(at(time.Duration(i) * 10 * time.Second))
	}
	want(at(time.Minute), 0, 0, 2, "a slow trickle stays at the floor")

	// The burst: 16 clients at once; two find a warm sandbox, fourteen wait. Each wait raises
	// the target by one, up to the clients waiting (the two held are not known before the
	// next update), and the update that sees all sixteen in use raises it to them at once,
	// capped at the ceiling.
	burst := at(2 * time.Minute)
	for range 16 {
		s.leased(burst)
	}
	for i := 1; i <= 14; i++ {
		s.waited(burst, i)
	}
	if s.target != 14 {
		t.Fatalf("fourteen leases waited: target %d, want 14", s.target)
	}
	want(burst, 2, 14, 16, "sixteen clients in use, fourteen waiting: 2 + 14")
	s.waited(burst, 15)
	want(burst, 2, 15, 16, "more waits stop at max_warm")

	// A minute of leases at 3/s (the engine's pace under the burst), the creates slower now
	// (1.2 s each, the engine busy): the target holds, and the sixteen clients' waits keep it
	// from falling.
	for sec := 1; sec <= 60; sec++ {
		now := burst.Add(time.Duration(sec) * time.Second)
		for range 3 {
			s.leased(now)
		}
		s.created(1200 * time.Millisecond)
		if sec%5 == 0 {
			s.waited(now, 14)
		}
		want(now, 2, 14, 16, "leases still wait")
	}
	end := burst.Add(time.Minute)

	// Little's law on its own: 3/s for about 1.2 s is 3.6 in flight, plus its square root
	// (1.9): 6 sandboxes. Checked on a fresh sizer of a larger ceiling, which no wait raised,
	// under many long leases (40 held), so the clients in use do not bound it.
	little := newSizer(2, 32)
	little.created(1200 * time.Millisecond)
	for sec := range 60 {
		for range 3 {
			little.leased(end.Add(time.Duration(sec) * time.Second))
		}
	}
	if got := little.update(end.Add(time.Minute), 40, 0); got != 6 {
		t.Fatalf("3 leases/s at 1.2 s per create: target %d, want 6 (rate %.2f)", got, little.rate(end.Add(time.Minute)))
	}
	// And 12/s for 1.2 s: 14.4 + 3.8, 19.
	for sec := 60; sec < 120; sec++ {
		for range 12 {
			little.leased(end.Add(time.Duration(sec) * time.Second))
		}
	}
	if got := little.update(end.Add(2*time.Minute), 40, 0); got != 19 {
		t.Fatalf("12 leases/s at 1.2 s per create: target %d, want 19", got)
	}

	// Idle: nothing leased after the burst. The growth is held a minute after the last wait
	// (at +60 s of the burst), then the excess over the floor halves every 30 s.
	lastWait := end
	want(lastWait.Add(59*time.Second), 0, 0, 16, "held for a minute after the last wait")
	want(lastWait.Add(60*time.Second), 0, 0, 9, "16 - (14+1)/2")
	want(lastWait.Add(75*time.Second), 0, 0, 9, "not again within 30 s")
	want(lastWait.Add(90*time.Second), 0, 0, 5, "9 - (7+1)/2")
	want(lastWait.Add(120*time.Second), 0, 0, 3, "5 - (3+1)/2")
	want(lastWait.Add(150*time.Second), 0, 0, 2, "3 - (1+1)/2: the floor")
	want(lastWait.Add(10*time.Minute), 0, 0, 2, "an idle pool stays at its floor")
	if r := s.rate(lastWait.Add(2 * time.Minute)); r != 0 {
		t.Fatalf("rate %.2f two minutes after the last lease", r)
	}

	// A new burst after the idle period grows it at once again: two clients held and six
	// waiting are eight. A second burst 50 s later, within the hold, grows it to the clients
	// in use then: eight held and three more waiting.
	again := lastWait.Add(20 * time.Minute)
	for i := 1; i <= 6; i++ {
		s.waited(again, i)
	}
	want(again, 2, 6, 8, "two held and six waiting")
	for range 20 {
		s.leased(again.Add(5 * time.Second))
	}
	want(again.Add(30*time.Second), 8, 0, 8, "within the hold")
	s.waited(again.Add(50*time.Second), 3)
	want(again.Add(50*time.Second), 8, 3, 11, "eight held and three waiting")
	want(again.Add(100*time.Second), 8, 0, 11, "held a minute after the second burst")
}

// TestSizerTwoClientLoop drives the sizer as two clients looping lease, command, release drive
// it, at make up's defaults (min_warm 2, max_warm 16): each client leases about three times a
// second, half their leases find nothing warm (the engine, busy destroying, makes sandboxes in
// 1.5 s), and the refill updates the target every second with the two clients in use. Little's
// law counts every one of their leases as an arrival and calls for the ceiling; the target
// settles at the two clients and their margin, four, and never passes it. Then a burst of 16
// clients grows it at once, and once the burst is over and the two clients loop on, it falls
// back to four: their waits on a pool larger than they are neither grow it nor hold it.
func TestSizerTwoClientLoop(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s := newSizer(2, 16)
	loop := func(from time.Time, d time.Duration, check func(now time.Time, target int)) time.Time {
		t.Helper()
		var now time.Time
		for sec := range int(d / time.Second) {
			now = from.Add(time.Duration(sec) * time.Second)
			for i := range 6 { // two clients, three leases a second each
				at := now.Add(time.Duration(i) * time.Second / 6)
				s.leased(at)
				if i%2 == 1 {
					s.waited(at, 1) // the other client holds its lease meanwhile
				}
			}
			s.created(1500 * time.Millisecond)
			target := s.update(now, 1, 1)
			if check != nil {
				check(now, target)
			}
		}
		return now
	}
	settled := loop(t0, 5*time.Minute, func(now time.Time, target int) {
		if target > 4 {
			t.Fatalf("at +%s: target %d, more than the two clients and their margin (4)", now.Sub(t0), target)
		}
	})
	if got := s.update(settled, 1, 1); got != 4 {
		t.Fatalf("a 2-client loop settled at target %d, want 4", got)
	}
	// What Little's law alone called for (and the target was before): 6/s for 1.5 s is 9 in
	// flight, plus 3: the ceiling.
	if little := withMargin(s.rate(settled) * s.create.Seconds()); little < 12 {
		t.Fatalf("Little's law alone calls for %d; the loop does not test what it means to", little)
	}

	// A burst of 16 clients at once: the two looping hold theirs, fourteen new ones wait. The
	// target grows with each wait, and the next update sees sixteen in use.
	burst := settled.Add(time.Second)
	for i := 1; i <= 14; i++ {
		s.leased(burst)
		s.waited(burst, i)
	}
	if s.target != 15 {
		t.Fatalf("fourteen leases waiting beside one held: target %d, want 15 (1 + 14)", s.target)
	}
	if got := s.update(burst, 2, 14); got != 16 {
		t.Fatalf("sixteen clients in use: target %d, want 16", got)
	}
	// The burst ends at once; the two clients loop on. Their waits on a pool of 16 hold
	// nothing: after the minute's hold it halves its excess over four every 30 s.
	var fell []int
	last := -1
	after := loop(burst.Add(time.Second), 4*time.Minute, func(now time.Time, target int) {
		if target != last {
			fell = append(fell, target)
			last = target
		}
	})
	if got := s.update(after, 1, 1); got != 4 {
		t.Fatalf("four minutes after the burst, the 2-client loop's target is %d (it went %v), want 4", got, fell)
	}
	if want := []int{16, 10, 7, 5, 4}; !slices.Equal(fell, want) {
		t.Fatalf("after the burst the target went %v, want %v", fell, want)
	}
}

// TestSizerRateWindows checks the two views of the lease rate: ten seconds of a burst show at
// once in the short window, and the long window remembers a minute.
func TestSizerRateWindows(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	s := newSizer(0, 8)
	for range 20 {
		s.leased(t0)
	}
	if r := s.rate(t0); r != 0 {
		t.Fatalf("the second under way counts: rate %.2f", r)
	}
	if r := s.rate(t0.Add(time.Second)); r != 2 {
		t.Fatalf("20 leases in the last 10 s: rate %.2f, want 2", r)
	}
	if r := s.rate(t0.Add(30 * time.Second)); r != 20.0/60 {
		t.Fatalf("20 leases in the last minute: rate %.3f, want %.3f", r, 20.0/60)
	}
	if r := s.rate(t0.Add(61 * time.Second)); r != 0 {
		t.Fatalf("a minute and a second later: rate %.2f", r)
	}
	// The ring reuses its slots: a lease 60 s after another replaces it, not adds to it.
	s.leased(t0.Add(60 * time.Second))
	if r := s.rate(t0.Add(61 * time.Second)); r != 1.0/10 {
		t.Fatalf("one lease a second ago: rate %.2f", r)
	}
	// An empty sizer at a floor of 0 asks for nothing.
	if got := newSizer(0, 8).update(t0, 0, 0); got != 0 {
		t.Fatalf("an unused pool of floor 0: target %d", got)
	}
	// A ceiling below the floor is the floor: a fixed pool.
	fixed := newSizer(3, 1)
	for i := 1; i <= 10; i++ {
		fixed.waited(t0, i)
	}
	if got := fixed.update(t0, 0, 10); got != 3 {
		t.Fatalf("a fixed pool of 3 grew to %d", got)
	}
}
