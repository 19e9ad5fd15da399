package pool

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the pool's Prometheus metrics.
type Metrics struct {
	leaseLatency prometheus.Histogram
	coldStarts   prometheus.Counter
	refill       prometheus.Histogram
	reaps        prometheus.Counter
	createFails  prometheus.Counter
	unhealthies  prometheus.Counter
	drains       prometheus.Counter
}

// NewMetrics registers the pool's metrics on reg and attaches them to m. Pool sizes are read
// from the store when scraped.
func NewMetrics(reg prometheus.Registerer, m *Manager) *Metrics {
	mt := &Metrics{
		leaseLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_pool_lease_duration_seconds", Help: "Time to verify a token, claim and bind a sandbox.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, 1, 5, 30},
		}),
		coldStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_pool_cold_starts_total", Help: "Leases served by starting a sandbox because none was warm.",
		}),
		refill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_pool_sandbox_create_duration_seconds", Help: "Time to create and start one sandbox.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}),
		reaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_pool_reaps_total", Help: "Leases ended by the reaper because they expired.",
		}),
		createFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_pool_create_failures_total", Help: "Sandbox creations that failed.",
		}),
		unhealthies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_pool_unhealthy_total", Help: "Warm sandboxes replaced because they failed a health check.",
		}),
		drains: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_pool_drained_total", Help: "Warm sandboxes destroyed because their template's image was rebuilt.",
		}),
	}
	sizes := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "airlock_pool_sandboxes", Help: "Sandboxes by template and state (warm, leased).",
	}, []string{"template", "state"})
	reg.MustRegister(mt.leaseLatency, mt.coldStarts, mt.refill, mt.reaps, mt.createFails, mt.unhealthies, mt.drains, poolCollector{m: m, desc: sizes})
	m.metrics = mt
	return mt
}

// poolCollector reads pool sizes from the store at scrape time.
type poolCollector struct {
	m    *Manager
	desc *prometheus.GaugeVec
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { c.desc.Describe(ch) }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ps, err := c.m.Pools(ctx)
	if err != nil {
		return
	}
	c.desc.Reset()
	for _, p := range ps {
		c.desc.WithLabelValues(p.Template, "warm").Set(float64(p.Warm))
		c.desc.WithLabelValues(p.Template, "leased").Set(float64(p.Leased))
	}
	c.desc.Collect(ch)
}

func (mt *Metrics) observeLease(d time.Duration) {
	if mt != nil {
		mt.leaseLatency.Observe(d.Seconds())
	}
}

func (mt *Metrics) observeCreate(d time.Duration, err error) {
	if mt == nil {
		return
	}
	if err != nil {
		mt.createFails.Inc()
		return
	}
	mt.refill.Observe(d.Seconds())
}

func (mt *Metrics) coldStart() {
	if mt != nil {
		mt.coldStarts.Inc()
	}
}

func (mt *Metrics) reaped() {
	if mt != nil {
		mt.reaps.Inc()
	}
}

func (mt *Metrics) unhealthy() {
	if mt != nil {
		mt.unhealthies.Inc()
	}
}

func (mt *Metrics) drained() {
	if mt != nil {
		mt.drains.Inc()
	}
}
