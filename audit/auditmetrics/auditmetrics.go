// Package auditmetrics serves the audit trail's counters as Prometheus metrics, so that package
// audit, which the CLI links to read and verify trails, links no Prometheus client.
package auditmetrics

import (
	"github.com/airlock-dev/airlock/audit"
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the trail's metrics: records written and refused, checkpoints signed and when
// the last was, the segments kept and their bytes, and each live lease's denials and flagged
// records.
func Collectors(s *audit.FileSink) []prometheus.Collector {
	counter := func(name, help string, v func(audit.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(s.Stats())) })
	}
	gauge := func(name, help string, v func(audit.Stats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v(s.Stats())) })
	}
	return []prometheus.Collector{
		counter("airlock_audit_records_total", "Records written to the audit trail.", func(st audit.Stats) uint64 { return st.Written }),
		counter("airlock_audit_refused_total", "Records the audit trail refused (queue full, closed or broken): the traffic they described was refused too.", func(st audit.Stats) uint64 { return st.Refused }),
		counter("airlock_audit_checkpoints_total", "Checkpoints signed over the audit trail.", func(st audit.Stats) uint64 { return st.Checkpoints }),
		gauge("airlock_audit_last_checkpoint_timestamp_seconds", "When the last checkpoint was signed (unix time).", func(st audit.Stats) int64 {
			if st.LastCheckpoint.IsZero() {
				return 0
			}
			return st.LastCheckpoint.Unix()
		}),
		gauge("airlock_audit_segments", "Segments of the audit trail on disk.", func(st audit.Stats) int64 { return st.Segments }),
		gauge("airlock_audit_bytes", "Bytes of the audit trail on disk.", func(st audit.Stats) int64 { return st.Bytes }),
		leases{s},
	}
}

var (
	leaseDenialsDesc = prometheus.NewDesc("airlock_audit_lease_denials_total",
		"Denials recorded for each live lease (the series ends with the lease).", []string{"tenant", "lease"}, nil)
	leaseFlaggedDesc = prometheus.NewDesc("airlock_audit_lease_flagged_total",
		"Records flagged for review (tunnel-shaped DNS) for each live lease.", []string{"tenant", "lease"}, nil)
)

// leases collects the per-lease counts the trail keeps (audit.FileSink.EachLease).
type leases struct{ s *audit.FileSink }

var _ prometheus.Collector = leases{}

func (leases) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaseDenialsDesc
	ch <- leaseFlaggedDesc
}

func (c leases) Collect(ch chan<- prometheus.Metric) {
	c.s.EachLease(func(tenant, lease string, denials, flagged uint64) {
		ch <- prometheus.MustNewConstMetric(leaseDenialsDesc, prometheus.CounterValue, float64(denials), tenant, lease)
		ch <- prometheus.MustNewConstMetric(leaseFlaggedDesc, prometheus.CounterValue, float64(flagged), tenant, lease)
	})
}
