package pool

import (
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
	want := func(now time.Time, n int, why string) {
		t.Helper()
		if got := s.update(now); got != n {
			t.Fatalf("at +%s (%s): target %d, want %d (rate %.2f/s, create %s)", now.Sub(t0), why, got, n, s.rate(now), s.create)
		}
	}
	for range 4 {
		s.created(800 * time.Millisecond)
	}
	if s.create != 800*time.Millisecond {
		t.Fatalf("create time %s after four of 800ms", s.create)
	}
	want(at(0), 2, "nothing leased yet: the floor")

	// A lease every 10 s: 0.1/s for 0.8 s is 0.08 in flight, which rounds up to one, below
	// the floor.
	for i := range 6 {
		s.leased(at(time.Duration(i) * 10 * time.Second))
	}
	want(at(time.Minute), 2, "a slow trickle stays at the floor")

	// The burst: 16 clients at once; two find a warm sandbox, fourteen wait. The target rises
	// by the fourteen at once, capped at the ceiling.
	burst := at(2 * time.Minute)
	for range 16 {
		s.leased(burst)
	}
	s.waited(burst, 14)
	want(burst, 16, "fourteen leases waited: 2 + 14")
	s.waited(burst, 5)
	want(burst, 16, "more waits stop at max_warm")

	// A minute of leases at 3/s (the engine's pace under the burst), the creates slower now
	// (1.2 s each, the engine busy): the target holds, and waits keep it from falling.
	for sec := 1; sec <= 60; sec++ {
		now := burst.Add(time.Duration(sec) * time.Second)
		for range 3 {
			s.leased(now)
		}
		s.created(1200 * time.Millisecond)
		if sec%5 == 0 {
			s.waited(now, 1)
		}
		want(now, 16, "leases still wait")
	}
	end := burst.Add(time.Minute)

	// Little's law on its own: 3/s for about 1.2 s is 3.6 in flight, plus its square root
	// (1.9): 6 sandboxes. Checked on a fresh sizer of a larger ceiling, which no wait raised.
	little := newSizer(2, 32)
	little.created(1200 * time.Millisecond)
	for sec := range 60 {
		for range 3 {
			little.leased(end.Add(time.Duration(sec) * time.Second))
		}
	}
	if got := little.update(end.Add(time.Minute)); got != 6 {
		t.Fatalf("3 leases/s at 1.2 s per create: target %d, want 6 (rate %.2f)", got, little.rate(end.Add(time.Minute)))
	}
	// And 12/s for 1.2 s: 14.4 + 3.8, 19.
	for sec := 60; sec < 120; sec++ {
		for range 12 {
			little.leased(end.Add(time.Duration(sec) * time.Second))
		}
	}
	if got := little.update(end.Add(2 * time.Minute)); got != 19 {
		t.Fatalf("12 leases/s at 1.2 s per create: target %d, want 19", got)
	}

	// Idle: nothing leased after the burst. The growth is held a minute after the last wait
	// (at +60 s of the burst), then the excess over the floor halves every 30 s.
	lastWait := end
	want(lastWait.Add(59*time.Second), 16, "held for a minute after the last wait")
	want(lastWait.Add(60*time.Second), 9, "16 - (14+1)/2")
	want(lastWait.Add(75*time.Second), 9, "not again within 30 s")
	want(lastWait.Add(90*time.Second), 5, "9 - (7+1)/2")
	want(lastWait.Add(120*time.Second), 3, "5 - (3+1)/2")
	want(lastWait.Add(150*time.Second), 2, "3 - (1+1)/2: the floor")
	want(lastWait.Add(10*time.Minute), 2, "an idle pool stays at its floor")
	if r := s.rate(lastWait.Add(2 * time.Minute)); r != 0 {
		t.Fatalf("rate %.2f two minutes after the last lease", r)
	}

	// A new burst after the idle period grows it at once again, and the pause between two
	// bursts shorter than the hold keeps what the first grew.
	again := lastWait.Add(20 * time.Minute)
	s.waited(again, 6)
	want(again, 8, "the floor + 6 waits")
	for range 20 {
		s.leased(again.Add(5 * time.Second))
	}
	want(again.Add(30*time.Second), 8, "within the hold")
	s.waited(again.Add(50*time.Second), 3)
	want(again.Add(100*time.Second), 11, "a second burst 50 s later adds to the first")
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
	if got := newSizer(0, 8).update(t0); got != 0 {
		t.Fatalf("an unused pool of floor 0: target %d", got)
	}
	// A ceiling below the floor is the floor: a fixed pool.
	fixed := newSizer(3, 1)
	fixed.waited(t0, 10)
	if got := fixed.update(t0); got != 3 {
		t.Fatalf("a fixed pool of 3 grew to %d", got)
	}
}
