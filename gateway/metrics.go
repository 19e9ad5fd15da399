package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/gateway/ca"
)

// Metrics are the gateway's Prometheus metrics. Labels are fixed vocabularies (decision, rule
// names), never hosts or tasks, so cardinality stays bounded.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewMetrics registers the gateway's metrics on reg; tunnels and the certificate cache are read
// from p and a when scraped.
func NewMetrics(reg prometheus.Registerer, p *Proxy, a *ca.Authority) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_gateway_requests_total", Help: "Requests from sandboxes, by decision and the rule that decided.",
		}, []string{"decision", "rule"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_gateway_request_duration_seconds", Help: "Time from request to the end of the response, by decision.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"decision"}),
	}
	reg.MustRegister(m.requests, m.latency,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "airlock_gateway_open_tunnels", Help: "Uninspected CONNECT tunnels open now.",
		}, func() float64 { return float64(p.tunnels.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "airlock_gateway_cert_cache_hits_total", Help: "Leaf certificates served from the cache.",
		}, func() float64 { h, _ := a.CacheStats(); return float64(h) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "airlock_gateway_cert_cache_misses_total", Help: "Leaf certificates minted.",
		}, func() float64 { _, m := a.CacheStats(); return float64(m) }),
	)
	p.metrics = m
	return m
}

func (m *Metrics) observe(rec *audit.Record, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(string(rec.Decision), rec.Rule.String()).Inc()
	m.latency.WithLabelValues(string(rec.Decision)).Observe(d.Seconds())
}
