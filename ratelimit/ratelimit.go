package ratelimit

import (
	"sync"
	"time"
)

// Limiter is a token bucket per key: Rate tokens a second up to Burst. The zero value and nil
// allow everything. Safe for concurrent use.
type Limiter[K comparable] struct {
	rate, burst float64
	now         func() time.Time

	mu      sync.Mutex
	buckets map[K]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxKeys bounds the buckets kept; idle ones are dropped first.
const maxKeys = 65536

// New returns a limiter of rate per second with the given burst (at least rate); rate <= 0
// returns nil, which allows everything.
func New[K comparable](rate, burst int) *Limiter[K] {
	if rate <= 0 {
		return nil
	}
	return &Limiter[K]{rate: float64(rate), burst: float64(max(burst, rate)), now: time.Now, buckets: map[K]*bucket{}}
}

// Clock makes l read the time from now (tests drive it); it returns l.
func (l *Limiter[K]) Clock(now func() time.Time) *Limiter[K] {
	if l != nil {
		l.now = now
	}
	return l
}

// Allow takes a token for k, reporting false when its bucket is empty.
func (l *Limiter[K]) Allow(k K) bool {
	if l == nil {
		return true
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[k]
	if b == nil {
		if len(l.buckets) >= maxKeys {
			for key, v := range l.buckets {
				if now.Sub(v.last) > time.Minute {
					delete(l.buckets, key)
				}
			}
			if len(l.buckets) >= maxKeys {
				clear(l.buckets)
			}
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[k] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
