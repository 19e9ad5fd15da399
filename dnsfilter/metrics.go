package dnsfilter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the resolver's Prometheus metrics; labels are fixed vocabularies.
type Metrics struct {
	queries      *prometheus.CounterVec
	upstream     prometheus.Histogram
	cache        *prometheus.CounterVec
	auditRefusal prometheus.Counter
}

// NewMetrics registers the resolver's metrics on reg and attaches them to r.
func NewMetrics(reg prometheus.Registerer, r *Resolver) *Metrics {
	m := &Metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_dns_queries_total", Help: "Queries from sandboxes, by decision, rule and query type.",
		}, []string{"decision", "rule", "qtype"}),
		upstream: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_dns_upstream_duration_seconds", Help: "Time upstream resolvers took to answer.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
		}),
	}
	m.cache = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "airlock_dns_cache_lookups_total", Help: "Answer cache lookups for allowed names, by result.",
	}, []string{"result"})
	m.auditRefusal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "airlock_dns_audit_refusals_total", Help: "Queries refused because the audit trail could not take their record.",
	})
	reg.MustRegister(m.queries, m.upstream, m.cache, m.auditRefusal)
	r.metrics = m
	return m
}

func (m *Metrics) query(decision, rule, qtype string) {
	if m == nil {
		return
	}
	if qtype == "" {
		qtype = "other"
	}
	m.queries.WithLabelValues(decision, rule, qtype).Inc()
}

func (m *Metrics) upstreamTook(d time.Duration) {
	if m != nil {
		m.upstream.Observe(d.Seconds())
	}
}

func (m *Metrics) cacheHit(hit bool) {
	if m == nil {
		return
	}
	if hit {
		m.cache.WithLabelValues("hit").Inc()
	} else {
		m.cache.WithLabelValues("miss").Inc()
	}
}

func (m *Metrics) auditRefused() {
	if m != nil {
		m.auditRefusal.Inc()
	}
}
