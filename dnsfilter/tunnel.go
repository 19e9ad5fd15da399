package dnsfilter

import (
	"math"
	"strings"
	"sync"
	"time"
)

// TunnelLimits are the heuristics that guard names under wildcard scopes, where a task could
// otherwise encode data in the names it looks up. Zero fields take the defaults.
type TunnelLimits struct {
	MaxLabel      int           // longest label; default 40
	MaxName       int           // longest name; default 120
	EntropyBits   float64       // Shannon entropy per character on long labels; default 3.8
	EntropyMinLen int           // labels at least this long are entropy-checked; default 16
	MaxDistinct   int           // distinct names per lease under one apex in Window; default 200
	Window        time.Duration // default 5m
}

func (t TunnelLimits) withDefaults() TunnelLimits {
	if t.MaxLabel == 0 {
		t.MaxLabel = 40
	}
	if t.MaxName == 0 {
		t.MaxName = 120
	}
	if t.EntropyBits == 0 {
		t.EntropyBits = 3.8
	}
	if t.EntropyMinLen == 0 {
		t.EntropyMinLen = 16
	}
	if t.MaxDistinct == 0 {
		t.MaxDistinct = 200
	}
	if t.Window == 0 {
		t.Window = 5 * time.Minute
	}
	return t
}

// shape checks a name's form; it returns a reason when the name looks like a tunnel.
func (t TunnelLimits) shape(name string) string {
	if len(name) > t.MaxName {
		return "name longer than " + itoa(t.MaxName) + " characters"
	}
	for rest := name; rest != ""; {
		var l string
		l, rest, _ = strings.Cut(rest, ".")
		if len(l) > t.MaxLabel {
			return "label longer than " + itoa(t.MaxLabel) + " characters"
		}
		if len(l) >= t.EntropyMinLen && entropy(l) > t.EntropyBits {
			return "high-entropy label (encoded data?)"
		}
	}
	return ""
}

func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	h := 0.0
	n := float64(len(s))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// distinctNames counts the distinct names each lease looks up under each apex within a sliding
// window (two fixed halves), so a slow drip of unique names is caught too.
type distinctNames struct {
	limit  int
	window time.Duration

	mu      sync.Mutex
	buckets map[leaseApex]*nameBucket
}

type leaseApex struct{ lease, apex string }

type nameBucket struct {
	start     time.Time
	cur, prev map[string]struct{}
	flagged   bool
}

func newDistinctNames(limit int, window time.Duration) *distinctNames {
	return &distinctNames{limit: limit, window: window, buckets: map[leaseApex]*nameBucket{}}
}

// seen records name for lease under apex and reports whether the lease is over the limit for a
// new name. A name already seen in the window is always answered.
func (d *distinctNames) seen(lease, apex, name string, now time.Time) (over bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := leaseApex{lease, apex}
	b := d.buckets[key]
	half := d.window / 2
	if b == nil {
		b = &nameBucket{start: now, cur: map[string]struct{}{}, prev: map[string]struct{}{}}
		d.buckets[key] = b
		if len(d.buckets) > 100000 {
			d.prune(now)
		}
	}
	for now.Sub(b.start) >= half {
		b.prev, b.cur = b.cur, map[string]struct{}{}
		b.start = b.start.Add(half)
		if now.Sub(b.start) >= half { // idle for a whole window
			b.prev, b.start = map[string]struct{}{}, now
		}
	}
	if _, ok := b.cur[name]; ok {
		return false
	}
	if _, ok := b.prev[name]; ok {
		b.cur[name] = struct{}{}
		return false
	}
	distinct := len(b.cur) + len(b.prev)
	if distinct >= d.limit {
		b.flagged = true
		return true
	}
	b.cur[name] = struct{}{}
	return false
}

func (d *distinctNames) prune(now time.Time) {
	for k, b := range d.buckets {
		if now.Sub(b.start) > d.window {
			delete(d.buckets, k)
		}
	}
}
