package gateway

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"
)

// TestCopyBulkCopiesEverything copies bodies of many sizes, read in pieces of every size, and
// a body that fails after some bytes: every byte arrives in order, and the read error comes
// back after what was read before it.
func TestCopyBulkCopiesEverything(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, size := range []int{0, 1, copyBuffer - 1, copyBuffer, bulkBuffer + 3, 3<<20 + 17} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		for _, r := range []io.Reader{bytes.NewReader(body), iotest.HalfReader(bytes.NewReader(body)), iotest.DataErrReader(bytes.NewReader(body))} {
			var out bytes.Buffer
			n, err := copyBulk(&out, io.NopCloser(r))
			if err != nil || n != int64(size) || !bytes.Equal(out.Bytes(), body) {
				t.Fatalf("size %d: copied %d, err %v, same %v", size, n, err, bytes.Equal(out.Bytes(), body))
			}
		}
	}
	boom := errors.New("upstream cut the body")
	var out bytes.Buffer
	n, err := copyBulk(&out, io.NopCloser(io.MultiReader(bytes.NewReader(make([]byte, 100000)), iotest.ErrReader(boom))))
	if !errors.Is(err, boom) || n != 100000 {
		t.Fatalf("a body cut short: copied %d, err %v", n, err)
	}
}

// gatedReader returns its pieces one at a time, each only once the test lets it.
type gatedReader struct {
	pieces [][]byte
	next   chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if len(g.pieces) == 0 {
		return 0, io.EOF
	}
	<-g.next
	n := copy(p, g.pieces[0])
	g.pieces = g.pieces[1:]
	return n, nil
}

type signalWriter struct{ wrote chan []byte }

func (s signalWriter) Write(p []byte) (int, error) {
	s.wrote <- append([]byte(nil), p...)
	return len(p), nil
}

// TestCopyBulkHoldsNothingBack: bytes a slow body has given are written before its next read
// returns, so a trickling upstream reaches the sandbox as it comes.
func TestCopyBulkHoldsNothingBack(t *testing.T) {
	g := &gatedReader{pieces: [][]byte{[]byte("first"), []byte("second")}, next: make(chan struct{})}
	w := signalWriter{wrote: make(chan []byte, 4)}
	done := make(chan error, 1)
	go func() { _, err := copyBulk(w, io.NopCloser(g)); done <- err }()
	for _, want := range []string{"first", "second"} {
		g.next <- struct{}{}
		select {
		case got := <-w.wrote:
			if string(got) != want {
				t.Fatalf("wrote %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q was read but not written while the next read waits", want)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("the sandbox went away") }

// watchedBody counts the reads under way, and ends the one that waits when it is closed.
type watchedBody struct {
	reading atomic.Int32
	first   atomic.Bool
	closed  chan struct{}
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.reading.Add(1)
	defer b.reading.Add(-1)
	if b.first.CompareAndSwap(false, true) {
		return len(p), nil
	}
	<-b.closed // a slow upstream: nothing more until the body is closed
	return 0, errors.New("read on closed body")
}

func (b *watchedBody) Close() error {
	select {
	case <-b.closed:
	default:
		close(b.closed)
	}
	return nil
}

// TestCopyBulkStopsOnWriteError: a write that fails ends the copy with its error, and no read of
// the body is under way once it returns (the caller reads the trailers a read fills in).
func TestCopyBulkStopsOnWriteError(t *testing.T) {
	body := &watchedBody{closed: make(chan struct{})}
	done := make(chan error, 1)
	go func() { _, err := copyBulk(failingWriter{}, body); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a failed write was not reported")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("copyBulk did not return after a failed write")
	}
	if n := body.reading.Load(); n != 0 {
		t.Fatalf("%d reads of the body still under way after copyBulk returned", n)
	}
}

// BenchmarkScrubBulk scrubs a download shaped as make bench-gateway's injected bulk row: a bearer
// credential's forms (the token's, and "Bearer <token>"'s) searched for in random bytes (like the
// compressed archives agents download: a '%', '&' or '\' every 85 bytes or so), which arrive a
// TLS record (16 KiB) at a time and are read out through copyBulk's buffers.
func BenchmarkScrubBulk(b *testing.B) {
	const token = "bench-credential-0123456789abcdef"
	s := newScrubber([]string{token}, []string{"Bearer " + token})
	body := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(18, 443))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	buf := make([]byte, copyBuffer)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{s.reader(io.NopCloser(&pieceReader{b: body, n: 16 << 10}), nil)}, buf)
		if err != nil || n != int64(len(body)) {
			b.Fatalf("scrubbed %d of %d bytes: %v", n, len(body), err)
		}
	}
}
