package dnsfilter

import (
	"net/netip"
	"sync"
	"time"
)

// rateLimiter is a token bucket per source address.
type rateLimiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[netip.Addr]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(qps, burst int) *rateLimiter {
	return &rateLimiter{rate: float64(qps), burst: float64(burst), now: time.Now, buckets: map[netip.Addr]*bucket{}}
}

// allow takes a token for src, reporting false when its bucket is empty.
func (r *rateLimiter) allow(src netip.Addr) bool {
	if r == nil || r.rate <= 0 {
		return true
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[src]
	if b == nil {
		if len(r.buckets) > 65536 {
			for k, v := range r.buckets {
				if now.Sub(v.last) > time.Minute {
					delete(r.buckets, k)
				}
			}
		}
		b = &bucket{tokens: r.burst, last: now}
		r.buckets[src] = b
	}
	b.tokens = min(r.burst, b.tokens+now.Sub(b.last).Seconds()*r.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
