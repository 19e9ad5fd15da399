package dnsfilter

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"
)

// cacheKey identifies an upstream answer: the canonical name, type and class.
type cacheKey struct {
	name   string
	qtype  uint16
	qclass uint16
}

type cacheEntry struct {
	msg     *dns.Msg
	wire    *wireAnswer // nil when the answer does not pack for the fast path
	stored  time.Time
	expires time.Time
}

// answerCache holds upstream answers for their TTL (capped), negative answers for their SOA
// minimum (capped), and coalesces identical in-flight upstream queries. Safe for concurrent use.
type answerCache struct {
	maxTTL, maxNegTTL time.Duration
	maxEntries        int

	mu      sync.RWMutex
	entries map[cacheKey]*cacheEntry
	flight  singleflight.Group
}

func newAnswerCache(maxTTL, maxNegTTL time.Duration, maxEntries int) *answerCache {
	return &answerCache{maxTTL: maxTTL, maxNegTTL: maxNegTTL, maxEntries: maxEntries,
		entries: map[cacheKey]*cacheEntry{}}
}

func keyOf(q dns.Question) cacheKey {
	return cacheKey{name: strings.ToLower(q.Name), qtype: q.Qtype, qclass: q.Qclass}
}

// get returns a copy of the cached answer with TTLs lowered by its age, or nil.
func (c *answerCache) get(k cacheKey, now time.Time) *dns.Msg {
	e := c.live(k, now)
	if e == nil {
		return nil
	}
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			if h.Rrtype == dns.TypeOPT {
				continue
			}
			if h.Ttl > age {
				h.Ttl -= age
			} else {
				h.Ttl = 0
			}
		}
	}
	return m
}

// getWire returns the packed form of the cached answer and its age in seconds.
func (c *answerCache) getWire(k cacheKey, now time.Time) (*wireAnswer, uint32, bool) {
	e := c.live(k, now)
	if e == nil || e.wire == nil {
		return nil, 0, false
	}
	return e.wire, uint32(now.Sub(e.stored) / time.Second), true
}

// live returns the entry for k unless it is missing or expired at now.
func (c *answerCache) live(k cacheKey, now time.Time) *cacheEntry {
	c.mu.RLock()
	e := c.entries[k]
	c.mu.RUnlock()
	if e == nil || !now.Before(e.expires) {
		return nil
	}
	return e
}

// put stores m for its lifetime: the smallest TTL in it, or for a negative answer the SOA
// minimum, each capped. Failures (SERVFAIL, REFUSED) are not stored.
func (c *answerCache) put(k cacheKey, m *dns.Msg, now time.Time) {
	var ttl time.Duration
	switch {
	case m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0:
		ttl = c.maxTTL
		for _, rr := range m.Answer {
			ttl = min(ttl, time.Duration(rr.Header().Ttl)*time.Second)
		}
	case m.Rcode == dns.RcodeNameError || (m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0):
		ttl = c.maxNegTTL
		for _, rr := range m.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				ttl = min(ttl, time.Duration(min(soa.Minttl, soa.Hdr.Ttl))*time.Second)
			}
		}
	default:
		return
	}
	if ttl <= 0 {
		return
	}
	stored := m.Copy()
	// Never cache the EDNS options of one exchange; other additional records stay, so a cached
	// answer is refused for a private address in them exactly as the first one was.
	stored.Extra = slices.DeleteFunc(stored.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
	w := packWire(k, stored)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.maxEntries {
		// Drop expired entries; if none, drop an arbitrary tenth. Bounded memory over precision.
		for key, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, key)
			}
		}
		if len(c.entries) >= c.maxEntries {
			n := c.maxEntries / 10
			for key := range c.entries {
				delete(c.entries, key)
				if n--; n <= 0 {
					break
				}
			}
		}
	}
	c.entries[k] = &cacheEntry{msg: stored, wire: w, stored: now, expires: now.Add(ttl)}
}
