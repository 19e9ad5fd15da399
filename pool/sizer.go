package pool

import (
	"math"
	"time"
)

// sizer decides how many warm sandboxes one template's pool aims to hold: its target, between
// the template's min_warm and max_warm. The target follows Little's law: the leases asked for per
// second times the time a new sandbox takes to be created and checked is how many leases arrive
// while one is made, so that many (and a margin for the spread of arrivals, its square root)
// must be warm already for none of them to wait. It rises at once by the number of leases that
// found nothing warm, and it falls slowly: only after a quiet minute, and then by half of what
// it holds above what the rate calls for, every half minute, so an idle pool is back at its
// floor within a few minutes while a pause between two bursts keeps what the first one grew.
//
// It is driven with the time of each event, so tests run it on a clock of their own. Not safe
// for concurrent use (the manager's counts lock guards it).
type sizer struct {
	min, max int
	target   int
	// arrivals[i] counts the leases asked for in the second at[i] (unix seconds), a ring over
	// the last rateWindow.
	arrivals [rateWindow]int
	at       [rateWindow]int64
	create   time.Duration // a moving average of the time to create and check one sandbox
	measured bool          // create is measured, not the first guess
	grown    time.Time     // when the target last rose
	shrunk   time.Time     // when it last fell
}

const (
	// rateWindow is the long view of the lease rate, in seconds; burstWindow the short one,
	// which sees a burst before the long one has averaged it away.
	rateWindow  = 60
	burstWindow = 10
	// holdGrowth is how long the target keeps what it grew before it may fall; shrinkEvery
	// how often it then falls.
	holdGrowth  = time.Minute
	shrinkEvery = 30 * time.Second
	// firstCreate is the create time assumed before one was measured.
	firstCreate = time.Second
)

func newSizer(floor, ceiling int) *sizer {
	return &sizer{min: floor, max: max(floor, ceiling), target: floor, create: firstCreate}
}

// leased records a lease asking for a sandbox at now.
func (s *sizer) leased(now time.Time) {
	sec := now.Unix()
	i := int(sec % rateWindow)
	if s.at[i] != sec {
		s.at[i], s.arrivals[i] = sec, 0
	}
	s.arrivals[i]++
}

// created records that a sandbox took d to be created and checked.
func (s *sizer) created(d time.Duration) {
	if d <= 0 {
		return
	}
	if !s.measured {
		s.create, s.measured = d, true
		return
	}
	// A moving average of weight 1/4: a few slow creates (an engine under a burst) show within
	// a handful, and one outlier does not double the target.
	s.create += (d - s.create) / 4
}

// waited records that n leases found nothing warm at now: the target rises by n at once, and
// a pool whose leases still wait does not shrink, even at its ceiling.
func (s *sizer) waited(now time.Time, n int) {
	if n <= 0 {
		return
	}
	s.raise(now, s.target+n)
	s.grown = now
}

// rate is the lease rate at now, per second: the higher of the last minute's and the last ten
// seconds' (the second under way not counted, as it is not over).
func (s *sizer) rate(now time.Time) float64 {
	sec := now.Unix()
	var long, short int
	for i := range rateWindow {
		age := sec - s.at[i]
		if age < 1 || age > rateWindow {
			continue
		}
		long += s.arrivals[i]
		if age <= burstWindow {
			short += s.arrivals[i]
		}
	}
	return math.Max(float64(long)/rateWindow, float64(short)/burstWindow)
}

// desired is what the lease rate at now calls for: the leases that arrive while one sandbox is
// made, and the square root of that as a margin, rounded up.
func (s *sizer) desired(now time.Time) int {
	inFlight := s.rate(now) * s.create.Seconds()
	return int(math.Ceil(inFlight + math.Sqrt(inFlight)))
}

// update moves the target for now and returns it: up at once to what the rate calls for, down
// by half the excess once the growth is a minute old and the last fall half a minute old.
func (s *sizer) update(now time.Time) int {
	want := min(max(s.desired(now), s.min), s.max)
	switch {
	case want > s.target:
		s.raise(now, want)
	case want < s.target && now.Sub(s.grown) >= holdGrowth && now.Sub(s.shrunk) >= shrinkEvery:
		s.target -= (s.target - want + 1) / 2
		s.shrunk = now
	}
	return s.target
}

func (s *sizer) raise(now time.Time, to int) {
	to = min(to, s.max)
	if to > s.target {
		s.target, s.grown = to, now
	}
}
