package auditmetrics_test

import (
	"context"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/auditmetrics"
	"github.com/prometheus/client_golang/prometheus"
)

// The trail's metrics keep their names and read the trail's counters: records written, and a
// live lease's denials and flagged records, with no series for a lease that ended.
func TestCollectors(t *testing.T) {
	s, err := audit.OpenFile(audit.FileConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Written // the trail's own records of its start
	s.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Lease: "l1", Decision: audit.Deny})
	s.Write(ctx, audit.Record{Kind: audit.KindDNS, Tenant: "acme", Lease: "l1", Decision: audit.Deny, Flagged: true})
	s.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Lease: "l2", Decision: audit.Deny})
	s.Write(ctx, audit.Record{Kind: audit.KindLease, Tenant: "acme", Lease: "l2", Event: "release"})
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(auditmetrics.Collectors(s)...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"airlock_audit_records_total":                            float64(before + 4),
		"airlock_audit_refused_total":                            0,
		"airlock_audit_lease_denials_total,lease=l1,tenant=acme": 2,
		"airlock_audit_lease_flagged_total,lease=l1,tenant=acme": 1,
		"airlock_audit_checkpoints_total":                        0,
		"airlock_audit_last_checkpoint_timestamp_seconds":        0,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	for _, name := range []string{"airlock_audit_segments", "airlock_audit_bytes"} {
		if got[name] <= 0 {
			t.Errorf("%s = %v, want the trail's own, above 0", name, got[name])
		}
	}
	if _, ok := got["airlock_audit_lease_denials_total,lease=l2,tenant=acme"]; ok {
		t.Error("the series of a lease that ended is still served")
	}
}
