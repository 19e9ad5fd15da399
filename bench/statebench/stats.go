package main

import (
	"fmt"
	"slices"
	"time"
)

// samples are the durations of one measurement over its rounds.
type samples []time.Duration

// q is the q-quantile by nearest rank (q 0.5: the median; 0.9: the p90, which over five
// rounds is the slowest). It sorts s in place; zero when s is empty.
func (s samples) q(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// p50 and p90 in milliseconds, for the tables.
func (s samples) p50() string { return msText(s.q(0.5)) }
func (s samples) p90() string { return msText(s.q(0.9)) }

// msText prints d in milliseconds: whole above a second, one decimal below; "-" when zero
// (not measured).
func msText(d time.Duration) string {
	ms := float64(d.Microseconds()) / 1000
	switch {
	case d == 0:
		return "-"
	case ms >= 1000:
		return fmt.Sprintf("%.0f", ms)
	default:
		return fmt.Sprintf("%.1f", ms)
	}
}

// rate is bytes over d in MiB/s, "-" when either is zero.
func rate(bytes int64, d time.Duration) string {
	if bytes == 0 || d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(bytes)/(1<<20)/d.Seconds())
}

// mib prints bytes in MiB.
func mib(bytes int64) string {
	if bytes < 10<<20 {
		return fmt.Sprintf("%.2f", float64(bytes)/(1<<20))
	}
	return fmt.Sprintf("%.0f", float64(bytes)/(1<<20))
}

// tookMS is a duration the API reported in milliseconds.
func tookMS(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
