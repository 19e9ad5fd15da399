package exfil

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits are the heuristics. Zero fields take the defaults.
type Limits struct {
	MaxLabel      int           // longest label; default 40
	MaxName       int           // longest name; default 120
	EntropyBits   float64       // Shannon entropy per character on long labels; default 3.8
	EntropyMinLen int           // labels at least this long are entropy-checked; default 16
	MaxDistinct   int           // distinct names per lease under one apex in Window; default 200
	Window        time.Duration // default 5m
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxLabel == 0 {
		l.MaxLabel = 40
	}
	if l.MaxName == 0 {
		l.MaxName = 120
	}
	if l.EntropyBits == 0 {
		l.EntropyBits = 3.8
	}
	if l.EntropyMinLen == 0 {
		l.EntropyMinLen = 16
	}
	if l.MaxDistinct == 0 {
		l.MaxDistinct = 200
	}
	if l.Window == 0 {
		l.Window = 5 * time.Minute
	}
	return l
}

// Guard applies Limits to the names looked up under wildcard scopes. Safe for concurrent use;
// one Guard serves a node's resolver and gateway, so their lookups count together.
type Guard struct {
	limits   Limits
	distinct *distinctNames
}

// New returns a Guard with l (zero fields take the defaults).
func New(l Limits) *Guard {
	l = l.WithDefaults()
	return &Guard{limits: l, distinct: newDistinctNames(l.MaxDistinct, l.Window)}
}

// Limits returns the limits in force.
func (g *Guard) Limits() Limits { return g.limits }

// Check decides whether lease may look up name, a canonical name under the wildcard scope of
// apex, at now. It returns "" to allow, or why the name looks like data leaving: its shape (too
// long, high entropy), or one name too many under apex for the lease in the window. A name the
// lease already looked up in the window is always allowed; a refused one is not counted.
func (g *Guard) Check(lease, apex, name string, now time.Time) string {
	if reason := g.shape(name); reason != "" {
		return name + " refused: " + reason
	}
	if g.distinct.seen(lease, apex, name, now) {
		return "lease " + lease + " looked up more than " + strconv.Itoa(g.limits.MaxDistinct) +
			" distinct names under " + apex + " in " + g.limits.Window.String()
	}
	return ""
}

// shape checks a name's form; it returns a reason when the name looks like a tunnel.
func (g *Guard) shape(name string) string {
	t := g.limits
	if len(name) > t.MaxName {
		return "name longer than " + strconv.Itoa(t.MaxName) + " characters"
	}
	for rest := name; rest != ""; {
		var l string
		l, rest, _ = strings.Cut(rest, ".")
		if len(l) > t.MaxLabel {
			return "label longer than " + strconv.Itoa(t.MaxLabel) + " characters"
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
}

func newDistinctNames(limit int, window time.Duration) *distinctNames {
	return &distinctNames{limit: limit, window: window, buckets: map[leaseApex]*nameBucket{}}
}

// seen records name for lease under apex and reports whether the lease is over the limit for a
// new name.
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
	if len(b.cur)+len(b.prev) >= d.limit {
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
