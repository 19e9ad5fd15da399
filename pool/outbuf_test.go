package pool

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestOutBufKeepsTheLastBytes: written in pieces of any size, the buffer gives back exactly
// the last ProcessOutputKept bytes from any offset, and counts what it dropped.
func TestOutBufKeepsTheLastBytes(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	var all []byte
	b := newOutBuf()
	b.Write(make([]byte, 10)) // a little first, so a large write comes before the ring
	all = make([]byte, 10)
	for len(all) < 3*ProcessOutputKept+12345 {
		p := make([]byte, r.Intn(70000))
		r.Read(p)
		if r.Intn(20) == 0 || len(all) == 10 {
			p = make([]byte, ProcessOutputKept+r.Intn(1000)) // one write larger than what is kept
			r.Read(p)
		}
		b.Write(p)
		all = append(all, p...)
		for _, off := range []int64{0, int64(len(all)) - 1, int64(len(all)) / 2, int64(len(all)) - int64(ProcessOutputKept)} {
			if off < 0 {
				continue
			}
			data, next, dropped, _ := b.read(off, ProcessOutputKept)
			start := max(int64(len(all))-int64(ProcessOutputKept), 0)
			wantFrom := max(off, start)
			want := all[wantFrom:min(int64(len(all)), wantFrom+int64(ProcessOutputKept))]
			if !bytes.Equal(data, want) || next != wantFrom+int64(len(want)) || dropped != wantFrom-off {
				t.Fatalf("after %d bytes, from %d: got %d bytes to %d (dropped %d), want %d to %d (dropped %d)",
					len(all), off, len(data), next, dropped, len(want), wantFrom+int64(len(want)), wantFrom-off)
			}
		}
	}
	if b.totalWritten() != int64(len(all)) {
		t.Fatalf("total %d, want %d", b.totalWritten(), len(all))
	}
	// A read past the end is empty and stays at the end.
	if data, next, _, _ := b.read(int64(len(all))+10, 10); len(data) != 0 || next != int64(len(all)) {
		t.Fatalf("past the end: %d bytes, next %d", len(data), next)
	}
}
