package audit

import (
	"bufio"
	"context"
	"os"
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

// BenchmarkWriterStep is the writer goroutine's cost per record: encoding, hashing, indexing and
// the buffered write (to a discarding file).
func BenchmarkWriterStep(b *testing.B) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := &FileSink{f: f, w: bufio.NewWriterSize(f, 64<<10), active: newIndex()}
	recs := make([]Record, 64)
	for i := range recs {
		recs[i] = benchRecord(i)
		recs[i].Time = time.Now()
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := recs[i%len(recs)]
		s.append(&r)
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
