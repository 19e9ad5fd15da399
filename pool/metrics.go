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
	shrinks      prometheus.Counter
	starts       *prometheus.CounterVec
	waits        prometheus.Histogram
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
	mt.shrinks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "airlock_pool_shrunk_total", Help: "Warm sandboxes destroyed because the pool's target fell below them.",
	})
	mt.starts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "airlock_pool_lease_starts_total", Help: "Leases by how their sandbox came: warm, waited (for the refill) or cold (started for the lease).",
	}, []string{"start"})
	mt.waits = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "airlock_pool_lease_wait_seconds", Help: "How long leases that found no warm sandbox waited for one (waited and cold starts).",
		Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30, 60},
	})
	c := poolCollector{m: m,
		sizes:  prometheus.NewDesc("airlock_pool_sandboxes", "Sandboxes by template and state (warm, leased, creating), and leases waiting for one (waiting).", []string{"template", "state"}, nil),
		target: prometheus.NewDesc("airlock_pool_warm_target", "How many warm sandboxes the template's pool aims at now, between min_warm and max_warm.", []string{"template"}, nil),
		rate:   prometheus.NewDesc("airlock_pool_lease_rate", "Leases asked for per second, the higher of the last minute's and the last ten seconds' rate.", []string{"template"}, nil),
		create: prometheus.NewDesc("airlock_pool_create_seconds", "The moving average of the time to create and check one sandbox, which the target is sized with.", []string{"template"}, nil),
	}
	reg.MustRegister(mt.leaseLatency, mt.coldStarts, mt.refill, mt.reaps, mt.createFails, mt.unhealthies, mt.drains, mt.shrinks, mt.starts, mt.waits, c)
	m.supply.metrics, m.leaseTable.metrics = mt, mt
	return mt
}

// poolCollector reads pool sizes from the store, and the sizing of each pool, at scrape time.
type poolCollector struct {
	m                           *Manager
	sizes, target, rate, create *prometheus.Desc
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sizes
	ch <- c.target
	ch <- c.rate
	ch <- c.create
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ps, err := c.m.Pools(ctx)
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, p := range ps {
		gauge(c.sizes, float64(p.Warm), p.Template, "warm")
		gauge(c.sizes, float64(p.Leased), p.Template, "leased")
		gauge(c.sizes, float64(p.Creating), p.Template, "creating")
		gauge(c.sizes, float64(p.Waiting), p.Template, "waiting")
		gauge(c.target, float64(p.Target), p.Template)
		gauge(c.rate, p.LeaseRate, p.Template)
		gauge(c.create, p.CreateSeconds, p.Template)
	}
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

// started counts a lease by how its sandbox came, and how long one that found none warm waited.
func (mt *Metrics) started(how Start, waited time.Duration) {
	if mt == nil {
		return
	}
	mt.starts.WithLabelValues(string(how)).Inc()
	if how == StartCold {
		mt.coldStarts.Inc()
	}
	if how != StartWarm {
		mt.waits.Observe(waited.Seconds())
	}
}

func (mt *Metrics) shrank() {
	if mt != nil {
		mt.shrinks.Inc()
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
