package audit

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// FileConfig configures a FileSink.
type FileConfig struct {
	Path string
	// Queue bounds the records accepted but not yet written; zero means 4096. When it is full
	// Write fails, so traffic is refused instead of piling up in memory.
	Queue int
	// FlushEvery bounds how long an accepted record may wait before it reaches the file (and
	// so the records a crash of the process can lose); zero means 20ms.
	FlushEvery time.Duration
}

// FileSink appends records as JSON lines, each carrying the hash of the one before it, so an
// edited or deleted line breaks the chain (see Verify). Safe for concurrent use.
//
// Writers append to a pending batch under a lock; the writer goroutine takes the whole batch at
// once, so under load it wakes once per batch rather than once per record.
//
// Crash bound: a record is written within FlushEvery of Write returning, so kill -9 loses at most
// the records accepted in the last FlushEvery (and never more than Queue of them).
type FileSink struct {
	cfg     FileConfig
	wake    chan struct{} // capacity 1: pending went from empty to not
	done    chan struct{}
	flushes chan chan error

	mu      sync.Mutex
	pending []Record
	err     error // sticky: once the file cannot be written, every Write fails
	closed  bool

	// Owned by the writer goroutine.
	f      *os.File
	seq    uint64
	prev   string
	enc    encoder
	buf    []byte
	hashed []byte // scratch for the hash input
	batch  []Record
}

// OpenFile opens (or creates) the trail at cfg.Path, continuing its hash chain, and starts the
// writer. Close stops it.
func OpenFile(cfg FileConfig) (*FileSink, error) {
	if cfg.Queue == 0 {
		cfg.Queue = 4096
	}
	if cfg.FlushEvery == 0 {
		cfg.FlushEvery = 20 * time.Millisecond
	}
	t, err := readTail(cfg.Path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(cfg.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if t.torn {
		// The last write of an earlier run stopped mid-line: end that line, so the next record
		// starts on its own. Verification reports the torn line by position.
		if _, err := f.Write([]byte("\n")); err != nil {
			f.Close()
			return nil, fmt.Errorf("audit: %w", err)
		}
	}
	seq, prev := t.seq, t.hash
	s := &FileSink{cfg: cfg, wake: make(chan struct{}, 1), done: make(chan struct{}), flushes: make(chan chan error),
		pending: make([]Record, 0, min(cfg.Queue, 1024)), f: f, seq: seq, prev: prev}
	go s.run()
	return s, nil
}

// Write queues r.
func (s *FileSink) Write(_ context.Context, r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	s.mu.Lock()
	switch {
	case s.err != nil:
		err := s.err
		s.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	case s.closed:
		s.mu.Unlock()
		return fmt.Errorf("%w: closed", ErrUnavailable)
	case len(s.pending) >= s.cfg.Queue:
		s.mu.Unlock()
		return fmt.Errorf("%w: queue full", ErrUnavailable)
	}
	s.pending = append(s.pending, r)
	first := len(s.pending) == 1
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func (s *FileSink) run() {
	defer close(s.done)
	w := bufio.NewWriterSize(s.f, 64<<10)
	tick := time.NewTicker(s.cfg.FlushEvery)
	defer tick.Stop()
	unflushed := false
	// drain writes every pending record; it reports whether the sink is closed.
	drain := func() bool {
		s.mu.Lock()
		s.batch, s.pending = s.pending, s.batch[:0]
		closed := s.closed
		s.mu.Unlock()
		for i := range s.batch {
			s.fail(s.append(w, &s.batch[i]))
			s.batch[i] = Record{} // drop references to the strings it held
		}
		unflushed = unflushed || len(s.batch) > 0
		return closed
	}
	for {
		select {
		case <-s.wake:
			if drain() {
				s.fail(w.Flush())
				s.fail(s.f.Close())
				return
			}
		case <-tick.C:
			if unflushed {
				s.fail(w.Flush())
				unflushed = false
			}
		case reply := <-s.flushes:
			// Everything accepted before the request is pending now.
			drain()
			s.fail(w.Flush())
			unflushed = false
			reply <- s.Err()
		}
	}
}

// Flush writes every record accepted before the call to the file, so a reader that follows
// sees them.
func (s *FileSink) Flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case s.flushes <- reply:
	case <-s.done:
		return fmt.Errorf("%w: closed", ErrUnavailable)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *FileSink) append(w io.Writer, r *Record) error {
	s.seq++
	r.Seq, r.Prev, r.Hash = s.seq, s.prev, ""
	// The hash covers prev followed by the record encoded without it; the line is that same
	// body with the hash spliced in as the last field. Verification hashes those exact bytes
	// again (see checkLine), so it never depends on decoding and re-encoding the record.
	body := s.enc.appendJSON(s.buf[:0], r)
	var hb [hashLen]byte
	h, hashed := appendChainHash(hb[:0], s.hashed, s.prev, body)
	s.hashed = hashed
	s.prev = string(h)
	line := append(body[:len(body)-1], hashPrefix...)
	line = append(line, h...)
	line = append(line, "\"}\n"...)
	s.buf = line
	_, err := w.Write(line)
	return err
}

func (s *FileSink) fail(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// Close writes what is queued and closes the file.
func (s *FileSink) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// appendChainHash appends to dst the hex SHA-256 of prev followed by body: a record's link in the
// chain. tmp is scratch space, returned for reuse.
func appendChainHash(dst, tmp []byte, prev string, body []byte) ([]byte, []byte) {
	tmp = append(append(tmp[:0], prev...), body...)
	sum := sha256.Sum256(tmp)
	return hex.AppendEncode(dst, sum[:]), tmp
}

// Err reports why a Write would fail now, or nil.
func (s *FileSink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return fmt.Errorf("%w: %v", ErrUnavailable, s.err)
	case s.closed:
		return fmt.Errorf("%w: closed", ErrUnavailable)
	case len(s.pending) >= s.cfg.Queue:
		return fmt.Errorf("%w: queue full", ErrUnavailable)
	}
	return nil
}
