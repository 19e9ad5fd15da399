package audit

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// benchRecord is a typical gateway record.
func benchRecord(i int) Record {
	return Record{Kind: KindHTTP, Node: "n", Tenant: "acme", Lease: "l-" + string(rune('a'+i%26)), Task: "t", Source: "10.0.0.2",
		Decision: Allow, Rule: "scope", Method: "GET", Host: "a.example", Port: 443, Path: "/x", Status: 200,
		BytesUp: 1, BytesDown: 2, DurationMS: 0.123}
}

// BenchmarkSinkWrite is the whole write path per record: Write, the writer goroutine's encoding,
// hashing, indexing and the buffered write, with a flush at the end.
func BenchmarkSinkWrite(b *testing.B) {
	s, err := OpenFile(FileConfig{Dir: b.TempDir(), Queue: 1 << 20, FlushEvery: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	recs := make([]Record, 64)
	for i := range recs {
		recs[i] = benchRecord(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for s.Write(ctx, recs[i%len(recs)]) != nil {
			s.Flush(ctx) // the queue is full: let the writer catch up
		}
		i++
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWriterStep is the writer goroutine's cost per record when records arrive one at a
// time: encoding, hashing, indexing and the buffered write (to a discarding file).
func BenchmarkWriterStep(b *testing.B) {
	s, recs := writerBench(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := recs[i%len(recs)]
		s.appendRecords([]Record{r}, math.MaxInt64)
		if i++; i%(1<<16) == 0 {
			s.active, s.size = newIndex(), 0 // a segment's worth: sealed
		}
	}
}

// BenchmarkWriterBatch is the writer goroutine's cost per record when records arrive faster
// than one at a time, as under load: its batches are written and indexed indexChunk at a time.
func BenchmarkWriterBatch(b *testing.B) {
	s, recs := writerBench(b)
	chunk := make([]Record, 0, indexChunk)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if chunk = append(chunk, recs[i%len(recs)]); len(chunk) == indexChunk {
			s.appendRecords(chunk, math.MaxInt64)
			chunk = chunk[:0]
		}
		if i++; i%(1<<16) == 0 {
			s.active, s.size = newIndex(), 0 // a segment's worth: sealed
		}
	}
}

// BenchmarkIndexAdd is what indexing adds to each record written.
func BenchmarkIndexAdd(b *testing.B) {
	recs := make([]Record, 64)
	for i := range recs {
		recs[i] = benchRecord(i)
		recs[i].Time = time.Now()
	}
	x := newIndex()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		recs[i%len(recs)].Seq = uint64(i + 1)
		x.add(&recs[i%len(recs)], int64(i*300), int64(i*300+300))
		if i++; i%(1<<16) == 0 {
			x = newIndex()
		}
	}
}

// benchTrail writes (once per process) a trail of AIRLOCK_AUDIT_BENCH_RECORDS records (default
// one million; the closing numbers use ten million) in 64 MiB segments: 2000 leases of 20
// tenants, each lease's records spread over the trail as interleaved traffic makes them.
func benchTrail(b *testing.B) (string, int) {
	n := 1_000_000
	if v := os.Getenv("AIRLOCK_AUDIT_BENCH_RECORDS"); v != "" {
		fmt.Sscan(v, &n)
	}
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-audit-bench-")
		if err != nil {
			b.Fatal(err)
		}
		s, err := OpenFile(FileConfig{Dir: dir, Node: "bench", Queue: 1 << 16, FlushEvery: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		start := time.Now().Add(-time.Duration(n) * time.Millisecond)
		for i := range n {
			r := benchRecord(i)
			// A lease lives for 5000 records of the trail's traffic, 40 at a time.
			lease := i/5000*40 + i%40
			r.Lease, r.Tenant = fmt.Sprintf("lease-%06d", lease), fmt.Sprintf("tenant-%02d", lease%20)
			r.Host = fmt.Sprintf("h%d.example", i%500)
			r.Time = start.Add(time.Duration(i) * time.Millisecond)
			for s.Write(ctx, r) != nil {
				s.Flush(ctx)
			}
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		benchDir = dir
	})
	return benchDir, n
}

var (
	benchOnce sync.Once
	benchDir  string
)

// BenchmarkQueryOneLease is a one-lease query of the trail through its indexes (a lease in the
// middle: 125 records).
func BenchmarkQueryOneLease(b *testing.B) {
	dir, n := benchTrail(b)
	t, err := OpenTrail(dir)
	if err != nil {
		b.Fatal(err)
	}
	lease := fmt.Sprintf("lease-%06d", n/2/5000*40+7)
	b.ResetTimer()
	for b.Loop() {
		got := 0
		if _, err := t.Query(context.Background(), Query{Lease: lease, Tenant: fmt.Sprintf("tenant-%02d", (n/2/5000*40+7)%20)},
			func(Record) error { got++; return nil }); err != nil || got != 125 {
			b.Fatalf("%d records of %s: %v", got, lease, err)
		}
	}
	b.ReportMetric(float64(n), "records")
}

// BenchmarkQueryOneHour is a one-hour query (3.6 million records at one per millisecond; the
// trail's whole span when it is shorter), counting without decoding more than it must: what the
// time blocks save.
func BenchmarkQueryOneHourOfOneTenant(b *testing.B) {
	dir, n := benchTrail(b)
	t, err := OpenTrail(dir)
	if err != nil {
		b.Fatal(err)
	}
	end := time.Now()
	for b.Loop() {
		got := 0
		if _, err := t.Query(context.Background(), Query{Tenant: "tenant-03", Since: end.Add(-time.Minute - time.Duration(n/10)*time.Millisecond)},
			func(Record) error { got++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenTrail is opening the trail for reading: every segment's summary (its index
// checked against its seal) and the last segment indexed from its records, as a node's start
// does.
func BenchmarkOpenTrail(b *testing.B) {
	dir, _ := benchTrail(b)
	for b.Loop() {
		if _, err := OpenTrail(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueryOneLeaseScan is the same one-lease query the way GET /v1/audit answered it before
// the trail had an index: every line read and checked, then filtered.
func BenchmarkQueryOneLeaseScan(b *testing.B) {
	dir, n := benchTrail(b)
	lease := fmt.Sprintf("lease-%06d", n/2/5000*40+7)
	names, _ := listSegments(dir)
	for b.Loop() {
		got := 0
		for _, name := range names {
			f, err := os.Open(filepath.Join(dir, name))
			if err != nil {
				b.Fatal(err)
			}
			scanLines(f, func(_ []byte, _ int64, r *Record, err error) error {
				if err == nil && r.Lease == lease {
					got++
				}
				return nil
			})
			f.Close()
		}
		if got != 125 {
			b.Fatalf("%d records", got)
		}
	}
}

// TestMain removes the trails the benchmarks and FuzzSealedIndex wrote.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	if fuzzBase.dir != "" {
		os.RemoveAll(fuzzBase.dir)
	}
	os.Exit(code)
}

// writerBench is a writer over a discarding file, and 64 records to give it, for the writer's
// benchmarks; the file is closed when b ends.
func writerBench(b *testing.B) (*FileSink, []Record) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	recs := make([]Record, 64)
	for i := range recs {
		recs[i] = benchRecord(i)
		recs[i].Time = time.Now()
	}
	return &FileSink{f: f, w: bufio.NewWriterSize(f, 64<<10), active: newIndex()}, recs
}
