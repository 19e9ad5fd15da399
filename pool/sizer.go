package pool

import (
	"math"
	"time"
)

// sizer decides how many warm sandboxes one template's pool aims to hold: its target, between
// the template's min_warm and max_warm. Two figures bound what the pool needs, and the target
// follows the smaller:
//
//   - Little's law: the leases asked for per second times the time a new sandbox takes to be
//     created and checked is how many leases arrive while one is made, so that many (and a
//     margin for the spread of arrivals, its square root) must be warm already for none of
//     them to wait. It is what open arrivals (many tasks, each leasing now and then) need.
//   - The clients in use: leases held and leases waiting, at their peak over the last minute,
//     with the same margin. However fast they loop, that many clients never ask for more
//     sandboxes at once than there are of them: two clients looping lease, command, release
//     ask for two at a time, and a pool of four serves them, where Little's law counted each
//     of their many leases as an arrival and grew the pool to its ceiling.
//
// It rises at once when leases find nothing warm, to as many clients as are in use (held and
// waiting), never by more: a lease that waits because the engine cannot make sandboxes as fast
// as a few clients use them grows nothing a larger pool would help. It falls slowly: only after
// a quiet minute, and then by half of what it holds above what it calls for, every half
// minute, so an idle pool is back at its floor within a few minutes while a pause between two
// bursts keeps what the first one grew.
//
// It is driven with the time of each event, so tests run it on a clock of their own. Not safe
// for concurrent use (the supply's queue lock guards it).
type sizer struct {
	min, max int
	target   int
	// arrivals[i] counts the leases asked for in the second at[i] (unix seconds), a ring over
	// the last rateWindow.
	arrivals [rateWindow]int
	at       [rateWindow]int64
	// used[i] is the most clients in use (leases held, and leases waiting) seen in
	// the second usedAt[i], a ring over the last rateWindow.
	used   [rateWindow]int
	usedAt [rateWindow]int64
	// held is the leases held at the last update: with the leases waiting, the clients in use.
	held     int
	create   time.Duration // a moving average of the time to create and check one sandbox
	measured bool          // create is measured, not the first guess
	grown    time.Time     // when the target last rose, or leases last waited on a pool no larger than their clients
	shrunk   time.Time     // when it last fell
}

const (
	// rateWindow is the long view of the lease rate and of the clients in use, in seconds;
	// burstWindow the short view of the rate, which sees a burst before the long one has
	// averaged it away.
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

// waited records that a lease found nothing warm at now, when waiting leases wait (it among
// them). The target rises by one at once, up to the clients in use (the leases held at the
// last update and those waiting), and a pool no larger than its clients does not shrink while
// they wait, even at its ceiling. A pool larger than its clients whose leases still wait is
// paced by the engine, not by its size: its waits neither grow it nor hold it.
func (s *sizer) waited(now time.Time, waiting int) {
	s.grow(now, 1, s.held+max(waiting, 1))
}

// grow raises the target by n, up to clients, the clients in use at now, and holds it while
// it is no larger than they are.
func (s *sizer) grow(now time.Time, n, clients int) {
	s.raise(now, min(s.target+n, clients))
	if s.target <= clients {
		s.grown = now
	}
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

// peak is the most clients in use in the last rateWindow seconds up to now, the second under
// way included.
func (s *sizer) peak(now time.Time) int {
	sec := now.Unix()
	p := 0
	for i := range rateWindow {
		if age := sec - s.usedAt[i]; age >= 0 && age < rateWindow {
			p = max(p, s.used[i])
		}
	}
	return p
}

// withMargin is n and its square root, rounded up: n clients (or leases in flight) and a
// margin for their spread.
func withMargin(n float64) int {
	return int(math.Ceil(n + math.Sqrt(n)))
}

// desired is what now calls for: the leases that arrive while one sandbox is made (Little's
// law), at most the clients in use at their peak, each with its margin.
func (s *sizer) desired(now time.Time) int {
	return min(withMargin(s.rate(now)*s.create.Seconds()), withMargin(float64(s.peak(now))))
}

// update records the clients using the pool at now, held (leases bound in the store; one
// between its claim and its binding is left out for that moment, a waiting lease that looks
// for a sandbox being pending too) and waiting, then moves the target for now and returns it: up at once by the leases waiting, up
// to the clients in use, and to what desired calls for; down by half the excess once the
// growth is a minute old and the last fall half a minute old.
func (s *sizer) update(now time.Time, held, waiting int) int {
	sec := now.Unix()
	i := int(sec % rateWindow)
	if s.usedAt[i] != sec {
		s.usedAt[i], s.used[i] = sec, 0
	}
	s.used[i] = max(s.used[i], held+waiting)
	s.held = held
	if waiting > 0 {
		s.grow(now, waiting, held+waiting)
	}
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
