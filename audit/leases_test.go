package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The lease overview, answered from the segments' tallies, lists exactly the leases that a scan
// of every record finds for each filter (never fewer: a lease with a matching record is always
// listed), with the counts the records add up to, on the writing node and offline, and after
// the indexes are rebuilt from their segments.
func TestLeasesMatchReference(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir, Node: "n", SegmentBytes: 16 << 10, Queue: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tenantOf := map[string]string{}
	for i := range 20 {
		tenantOf[fmt.Sprintf("l%d", i)] = pick("acme", "globex")
	}
	write := func(r Record) {
		if err := s.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		id := fmt.Sprintf("l%d", i)
		write(Record{Time: base.Add(time.Duration(i) * time.Minute), Kind: KindLease, Event: "bind", Lease: id, Tenant: tenantOf[id],
			Task: "t-" + id, Template: "default", Runtime: "runc"})
	}
	for i := range 4000 {
		id := fmt.Sprintf("l%d", rng.IntN(20))
		r := Record{Time: base.Add(20*time.Minute + time.Duration(i)*time.Second), Kind: Kind(pick("http", "http", "dns", "exec")),
			Lease: id, Tenant: tenantOf[id], Task: "t-" + id}
		switch r.Kind {
		case KindHTTP:
			r.Host = pick("a.example", "B.example", "c.example")
			// One lease asks for more names than a tally lists.
			if id == "l7" {
				r.Host = fmt.Sprintf("h%d.example", i)
			}
			r.Decision = Decision(pick("allow", "allow", "deny"))
			if r.Decision == Deny {
				r.Rule = "scope-miss"
			} else {
				r.Rule, r.Credential, r.BytesUp, r.BytesDown = "scope", pick("", "gh"), int64(rng.IntN(100)), int64(rng.IntN(1000))
			}
		case KindDNS:
			r.QName, r.Flagged = pick("a.example.", "x.tunnel.example."), rng.IntN(30) == 0
			if r.Flagged {
				r.Decision, r.Rule = Deny, "tunnel"
			}
		}
		write(r)
	}
	for i := range 10 {
		id := fmt.Sprintf("l%d", i)
		write(Record{Time: base.Add(2 * time.Hour), Kind: KindLease, Event: "release", Lease: id, Tenant: tenantOf[id], Task: "t-" + id})
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var all []Record
	if _, err := s.Query(context.Background(), Query{}, func(r Record) error { all = append(all, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if n := len(s.sealed); n < 5 {
		t.Fatalf("the test needs several segments, has %d", n+1)
	}
	queries := []Query{
		{}, {Tenant: "acme"}, {Lease: "l3"}, {Decision: "deny"}, {Decision: "deny", Tenant: "globex"}, {Flagged: true},
		{Kind: "exec"}, {Rule: "tunnel"}, {Host: "b.example"}, {Host: "h3999.example"}, {Host: "h5.example"},
		{Host: "nowhere.example"}, {Since: base.Add(90 * time.Minute)}, {Until: base.Add(5 * time.Minute)},
	}
	for _, q := range queries {
		want := map[string]bool{}
		for i := range all {
			if all[i].Lease != "" && q.Matches(&all[i]) {
				want[all[i].Lease] = true
			}
		}
		check := func(name string, got []LeaseSummary) {
			t.Helper()
			ids := map[string]bool{}
			for _, g := range got {
				ids[g.Lease] = true
			}
			for id := range want {
				if !ids[id] {
					t.Errorf("%s %+v: lease %s has a matching record and is not listed", name, q, id)
				}
			}
			// Combined filters may list a lease whose matches are on different records; single
			// ones list exactly the leases with a match.
			if q.Since.IsZero() && q.Until.IsZero() && len(ids) != len(want) {
				t.Errorf("%s %+v: %d leases listed, %d have a matching record", name, q, len(ids), len(want))
			}
		}
		got, _, err := s.Leases(context.Background(), LeaseQuery{q})
		if err != nil {
			t.Fatal(err)
		}
		check("node", got)
		tr, err := OpenTrail(dir)
		if err != nil {
			t.Fatal(err)
		}
		off, _, err := tr.Leases(context.Background(), LeaseQuery{q})
		if err != nil {
			t.Fatal(err)
		}
		check("offline", off)
	}

	// The counts of every lease are the sums of its records.
	got, _, _ := s.Leases(context.Background(), LeaseQuery{})
	for _, g := range got {
		var w LeaseSummary
		hosts := map[string]bool{}
		for _, r := range all {
			if r.Lease != g.Lease {
				continue
			}
			w.Records++
			w.BytesUp += r.BytesUp
			w.BytesDown += r.BytesDown
			if r.Decision == Deny {
				w.Denied++
			}
			if r.Flagged {
				w.Flagged++
			}
			if h := fieldValues(&r)[fieldHost]; h != "" {
				hosts[h] = true
			}
			if r.Event == "release" {
				w.Ended = r.Time
			}
		}
		if g.Records != w.Records || g.BytesUp != w.BytesUp || g.BytesDown != w.BytesDown || g.Denied != w.Denied ||
			g.Flagged != w.Flagged || !g.Ended.Equal(w.Ended) || g.Template != "default" || g.Started.IsZero() {
			t.Errorf("lease %s: tally %+v, records add up to %+v", g.Lease, g, w)
		}
		if len(hosts) <= MaxLeaseHosts && (g.HostsCut || !reflect.DeepEqual(g.Hosts, keysOfMap(hosts))) {
			t.Errorf("lease %s: hosts %v (cut %v), records name %v", g.Lease, g.Hosts, g.HostsCut, keysOfMap(hosts))
		}
		if g.Lease == "l7" && (!g.HostsCut || len(g.Hosts) != MaxLeaseHosts) {
			t.Errorf("lease l7 named %d hosts: tally lists %d, cut %v", len(hosts), len(g.Hosts), g.HostsCut)
		}
	}

	// Rebuilt indexes tally the same, byte for byte.
	idx, _ := filepath.Glob(filepath.Join(dir, "*"+indexExt))
	for _, p := range idx {
		old, _ := os.ReadFile(p)
		x, _, err := buildIndex(p[:len(p)-len(indexExt)] + segmentExt)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(old, x.encode()) {
			t.Fatalf("%s: the index rebuilt from the segment differs from the one written", filepath.Base(p))
		}
	}
}

// A forged tally cannot make a node hold unbounded lists.
func TestDecodeTallyBounded(t *testing.T) {
	x := newIndex()
	r := Record{Time: time.Now(), Kind: KindHTTP, Lease: "l", Host: "a.example", Seq: 1}
	x.add(&r, 0, 10)
	b := x.leases["l"].encode(nil)
	d := decoder{b: b}
	if _, err := d.tally(); err != nil {
		t.Fatalf("a tally does not read back: %v", err)
	}
	// Claim a million hosts.
	forged := x.leases["l"]
	for i := range MaxLeaseHosts + 1 {
		forged.hosts[fmt.Sprint(i)] = true
	}
	d = decoder{b: forged.encode(nil)}
	if _, err := d.tally(); err == nil {
		t.Fatal("a tally listing more hosts than a writer lists was read")
	}
}
