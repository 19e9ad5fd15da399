package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// Every query, through the index, answers exactly what testing each record with Matches
// answers, across sealed segments and the one being written, page by page.
func TestQueryMatchesReference(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir, Node: "n", SegmentBytes: 8 << 10, Queue: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	base := time.Now().Add(-time.Hour)
	for i := range 3000 {
		r := Record{Time: base.Add(time.Duration(i) * time.Second), Kind: Kind(pick("http", "dns", "exec")),
			Tenant: pick("acme", "globex"), Lease: pick("l1", "l2", "l3", "l4", ""), Task: pick("t1", "t2"),
			Decision: Decision(pick("allow", "deny")), Rule: "r", Flagged: rng.IntN(20) == 0}
		if r.Kind == KindDNS {
			r.QName = pick("A.example.", "b.example.")
		} else {
			r.Host = pick("a.example", "c.example")
		}
		s.Write(context.Background(), r)
	}
	s.Flush(context.Background())
	var all []Record
	s.Query(context.Background(), Query{}, func(r Record) error { all = append(all, r); return nil })
	if len(all) < 3000 {
		t.Fatalf("an empty query returned %d records", len(all))
	}
	queries := []Query{
		{Lease: "l2"}, {Lease: "l2", Tenant: "acme"}, {Tenant: "globex", Decision: "deny", Kind: "http"},
		{Host: "a.example"}, {Host: "A.EXAMPLE."}, {Flagged: true}, {Flagged: true, Tenant: "acme"},
		{Since: base.Add(10 * time.Minute), Until: base.Add(20 * time.Minute)},
		{Lease: "l3", Since: base.Add(30 * time.Minute)}, {Lease: "nobody"}, {Kind: "audit", Event: "segment"},
		{Task: "t1", Rule: "r", Decision: "allow"},
	}
	for _, q := range queries {
		var want []Record
		for i := range all {
			if q.Matches(&all[i]) {
				want = append(want, all[i])
			}
		}
		var got []Record
		res, err := s.Query(context.Background(), q, func(r Record) error { got = append(got, r); return nil })
		if err != nil || len(res.Problems) > 0 || !reflect.DeepEqual(seqs(got), seqs(want)) {
			t.Fatalf("query %+v: %d records, want %d (%v)", q, len(got), len(want), err)
		}
		// The same, a page of 7 at a time.
		var paged []Record
		for page := 0; ; page++ {
			pq := q
			pq.Limit, pq.After = 7, res.Next
			if page == 0 {
				pq.After = 0
			}
			res, err = s.Query(context.Background(), pq, func(r Record) error { paged = append(paged, r); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if !res.More {
				break
			}
		}
		if !reflect.DeepEqual(seqs(paged), seqs(want)) {
			t.Fatalf("query %+v in pages: %d records, want %d", q, len(paged), len(want))
		}
	}
	// An offline reader of the same directory answers the same.
	tr, err := OpenTrail(dir)
	if err != nil {
		t.Fatal(err)
	}
	var off []Record
	tr.Query(context.Background(), Query{Lease: "l1"}, func(r Record) error { off = append(off, r); return nil })
	var on []Record
	s.Query(context.Background(), Query{Lease: "l1"}, func(r Record) error { on = append(on, r); return nil })
	if !reflect.DeepEqual(seqs(off), seqs(on)) {
		t.Fatalf("offline reader: %d records, node: %d", len(off), len(on))
	}
}

func seqs(rs []Record) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

// A damaged index file never breaks a query: it is refused, named, and rebuilt on the next
// start.
func TestDecodeIndexRefusesGarbage(t *testing.T) {
	x := newIndex()
	for i := range 10 {
		x.add(&Record{Seq: uint64(i + 1), Lease: fmt.Sprint("l", i%2), Time: time.Now()}, int64(i*10), int64(i*10+10))
	}
	b := x.encode()
	if _, err := decodeIndex(b, [nFields]string{}, true); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, err := decodeIndex(c, [nFields]string{}, true); err == nil {
			t.Fatalf("flipping byte %d went unnoticed", i)
		}
	}
	for n := range len(b) {
		if _, err := decodeIndex(b[:n], [nFields]string{}, true); err == nil {
			t.Fatalf("an index cut to %d bytes decoded", n)
		}
	}
	// A forged index with its checksum made right: what a query would index by out of range.
	forged := func(edit func(*index)) error {
		y := newIndex()
		for i := range 10 {
			y.add(&Record{Seq: uint64(i + 1), Lease: "l", Time: time.Now()}, int64(i*10), int64(i*10+10))
		}
		edit(y)
		_, err := decodeIndex(y.encode(), [nFields]string{}, true)
		return err
	}
	for name, edit := range map[string]func(*index){
		"a posting past the last record": func(y *index) { *y.Postings[fieldLease]["l"] = append(*y.Postings[fieldLease]["l"], 99) },
		"postings out of order":          func(y *index) { p := *y.Postings[fieldLease]["l"]; p[3] = p[2] },
		"too few time blocks":            func(y *index) { y.Blocks = nil },
	} {
		if err := forged(edit); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// A segment whose hosts a sandbox inflated keeps no host values in memory, and a query on a host
// still finds its records (through the segment's index).
func TestSummaryBoundedUnderManyHosts(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir, Queue: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxSummaryValues + 10 {
		s.Write(context.Background(), Record{Kind: KindDNS, Lease: "l", Decision: Deny, QName: fmt.Sprintf("n%d.example.", i)})
	}
	s.Close()
	tr, err := OpenTrail(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := tr.segs[0].sum.Counts[fieldHost]; c != nil {
		t.Fatalf("the summary kept %d host values", len(c))
	}
	if tr.segs[0].sum.Counts[fieldLease]["l"] == 0 {
		t.Fatal("the summary lost the lease")
	}
	n := 0
	tr.Query(context.Background(), Query{Host: "n77.example"}, func(Record) error { n++; return nil })
	if n != 1 {
		t.Fatalf("host query found %d records", n)
	}
}

// An offline reader of a trail whose index file is damaged queries the index it rebuilds in
// memory, and writes nothing.
func TestOpenTrailWithDamagedIndex(t *testing.T) {
	dir := t.TempDir()
	s, _ := OpenFile(FileConfig{Dir: dir})
	s.Write(context.Background(), Record{Kind: KindHTTP, Lease: "l"})
	s.Close()
	s, _ = OpenFile(FileConfig{Dir: dir}) // seals the first segment, writing its index
	s.Close()
	idx := indexPath(filepath.Join(dir, segmentName(1)))
	os.WriteFile(idx, []byte("AIDX2\ngarbage"), 0o600)
	tr, err := OpenTrail(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, err := tr.Query(context.Background(), Query{Lease: "l"}, func(Record) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("query over a damaged index: %d records, %v", n, err)
	}
	if b, _ := os.ReadFile(idx); string(b) != "AIDX2\ngarbage" {
		t.Fatal("the offline reader rewrote the index")
	}
}
