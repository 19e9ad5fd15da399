package audit

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// FileConfig configures a FileSink.
type FileConfig struct {
	// Dir holds the trail's segments and their indexes.
	Dir  string
	Node string
	// Queue bounds the records accepted but not yet written; zero means 4096. When it is full
	// Write fails, so traffic is refused instead of piling up in memory.
	Queue int
	// FlushEvery bounds how long an accepted record may wait before it reaches the file (and
	// so the records a crash of the process can lose); zero means 20ms.
	FlushEvery time.Duration
	// A segment is sealed (and a new one begun) when it reaches SegmentBytes (zero: 64 MiB; at
	// most 4 GiB) or has been open for SegmentAge (zero: one hour).
	SegmentBytes int64
	SegmentAge   time.Duration
	// Retention: sealed segments older than KeepFor are deleted, and the oldest sealed ones
	// while the trail is larger than KeepBytes; zero keeps them. The segment being written is
	// never deleted. Each deletion leaves a retention record, covered by a checkpoint.
	KeepFor   time.Duration
	KeepBytes int64
	// Signer signs a checkpoint every CheckpointEvery (zero: 10s) while records arrive, when
	// asked (Checkpoint), and at Close, and the seal of each segment's index. Nil writes none.
	Signer          note.Signer
	CheckpointEvery time.Duration
	// Verifier is Signer's public key. At start the trail's index seals and, in the segments
	// whose index is rebuilt, its checkpoints are checked with it before an index is trusted or
	// sealed. Nil checks no signature: a seal then counts when its record verifies on its own and
	// links to the one before it, which anyone who can rewrite the chain can forge.
	Verifier note.Verifier
	// OnCheckpoint is given each checkpoint written, in order, from a goroutine of the sink's
	// own (only the latest is kept while it is busy), so it can copy it off the node.
	OnCheckpoint func(Checkpoint)

	clock func() time.Time // tests: what now is (zero: time.Now)
}

const (
	segmentExt = ".jsonl"
	indexExt   = ".idx"
)

// segmentName names a segment by the seq of its first record, so names sort in chain order.
func segmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, segmentExt) }

// FileSink writes the trail: JSON lines, each carrying the hash of the one before it, so an
// edited or deleted line breaks the chain, in segments of bounded size and age, each with an
// index (see index). Safe for concurrent use.
//
// Writers append to a pending batch under a lock; the writer goroutine takes the whole batch at
// once, so under load it wakes once per batch rather than once per record.
//
// Crash bound: a record is written within FlushEvery of Write returning, so kill -9 loses at most
// the records accepted in the last FlushEvery (and never more than Queue of them).
type FileSink struct {
	cfg         FileConfig
	wake        chan struct{} // capacity 1: pending went from empty to not
	done        chan struct{}
	flushes     chan chan error
	checkpoints chan chan checkpointReply
	published   chan Checkpoint // capacity 1: the latest checkpoint for OnCheckpoint

	mu      sync.Mutex
	pending []Record
	err     error // sticky: once the file cannot be written, every Write fails
	closed  bool

	// xmu guards what queries read: the sealed segments and the active segment's index
	// (appended by the writer, viewed by queries) and how much of it is flushed.
	xmu     sync.RWMutex
	sealed  []segmentSummary
	active  *index
	actName string
	flushed int // records of the active segment on the file
	// cache keeps the sealed indexes queries read last, checked against their seals.
	cache *indexCache

	// Owned by the writer goroutine.
	f          *os.File
	w          *bufio.Writer
	size       int64 // bytes of the active segment
	opened     time.Time
	seq        uint64
	prev       string
	enc        encoder
	buf        []byte
	hashed     []byte     // scratch for the hash input
	spans      [][2]int64 // scratch: the byte span of each record appendRecords wrote
	batch      []Record
	lastSigned uint64 // seq the last checkpoint signed
	lastCkpt   time.Time
	lastRetain time.Time
	nextName   uint64 // a new segment is named no lower than this (after every one there is)

	m metrics
}

var (
	_ Sink         = (*FileSink)(nil)
	_ Checker      = (*FileSink)(nil)
	_ Checkpointer = (*FileSink)(nil)
)

// metrics are read by Stats and EachLease without a lock.
type metrics struct {
	written, refused, checkpoints atomic.Uint64
	lastCheckpoint                atomic.Int64 // unix seconds
	segments, bytes               atomic.Int64
	leases                        leaseCounts
}

type checkpointReply struct {
	c   Checkpoint
	err error
}

// OpenFile opens (or creates) the trail in cfg.Dir, continuing its hash chain in a new segment,
// and starts the writer. Close stops it.
func OpenFile(cfg FileConfig) (*FileSink, error) {
	if cfg.Queue == 0 {
		cfg.Queue = 4096
	}
	if cfg.FlushEvery == 0 {
		cfg.FlushEvery = 20 * time.Millisecond
	}
	// Offsets in a segment are 32 bits: a segment is sealed well before its last line could end
	// past 4 GiB.
	switch maxSegment := int64(4<<30 - 2*maxLine); {
	case cfg.SegmentBytes <= 0:
		cfg.SegmentBytes = 64 << 20
	case cfg.SegmentBytes > maxSegment:
		cfg.SegmentBytes = maxSegment
	}
	if cfg.SegmentAge == 0 {
		cfg.SegmentAge = time.Hour
	}
	if cfg.clock == nil {
		cfg.clock = time.Now
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 10 * time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	segs, err := listSegments(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &FileSink{cfg: cfg, wake: make(chan struct{}, 1), done: make(chan struct{}), flushes: make(chan chan error),
		checkpoints: make(chan chan checkpointReply), published: make(chan Checkpoint, 1),
		pending: make([]Record, 0, min(cfg.Queue, 1024)), cache: newIndexCache(indexCacheBytes)}
	// Every segment on disk is sealed from now on: an index is trusted only where its seal
	// covers it, and the ones rebuilt here are sealed by the first records of the new segment.
	sealed, unsealed, err := openSegments(cfg.Dir, segs, openOptions{node: cfg.Node, verifier: cfg.Verifier, own: true})
	if err != nil {
		return nil, err
	}
	s.sealed = sealed
	for _, g := range sealed {
		n, _ := strconv.ParseUint(strings.TrimSuffix(g.Name, segmentExt), 10, 64)
		s.nextName = n + 1
		s.m.bytes.Add(g.Bytes)
	}
	// The chain continues from the last record of the trail that verifies.
	for i := len(s.sealed) - 1; i >= 0 && s.seq == 0; i-- {
		if s.sealed[i].Records == 0 {
			continue
		}
		r, err := readRecordAt(filepath.Join(cfg.Dir, s.sealed[i].Name), s.sealed[i].lastSpan)
		if err != nil {
			return nil, err
		}
		s.seq, s.prev = r.Seq, r.Hash
	}
	s.lastSigned = s.seq
	if err := s.openSegment("the node started", nil); err != nil {
		return nil, err
	}
	for _, u := range unsealed {
		if err := s.appendSeal(u); err != nil {
			return nil, err
		}
	}
	if cfg.OnCheckpoint != nil {
		go func() {
			for c := range s.published {
				cfg.OnCheckpoint(c)
			}
		}()
	}
	go s.run()
	return s, nil
}

// listSegments returns the names of the segments in dir, oldest first.
func listSegments(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if num, ok := strings.CutSuffix(n, segmentExt); ok && len(num) == 20 && !e.IsDir() {
			if _, err := strconv.ParseUint(num, 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// openSegment starts a new segment after the last record and writes its opening record. sealed,
// when set, is the segment just sealed: it joins the sealed list in the same step the new one
// becomes active, so a query never sees its records twice or not at all.
func (s *FileSink) openSegment(why string, sealed *segmentSummary) error {
	name := segmentName(max(s.seq+1, s.nextName))
	s.nextName = max(s.seq+1, s.nextName) + 1
	f, err := os.OpenFile(filepath.Join(s.cfg.Dir, name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	s.f, s.w, s.size, s.opened = f, bufio.NewWriterSize(f, 64<<10), 0, time.Now()
	s.xmu.Lock()
	if sealed != nil {
		s.sealed = append(s.sealed, *sealed)
	}
	s.active, s.actName, s.flushed = newIndex(), name, 0
	s.m.segments.Store(int64(len(s.sealed) + 1))
	s.xmu.Unlock()
	return s.appendOwn(Record{Kind: KindAudit, Event: EventSegment, Segment: name, Reason: why})
}

// seal ends the active segment: its bytes reach the disk, its index is written beside it, and a
// new segment begins with the index's seal right after its opening record (see seal.go).
func (s *FileSink) seal(why string) error {
	if err := s.w.Flush(); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	if err := s.f.Close(); err != nil {
		return err
	}
	s.xmu.Lock()
	x, name := s.active, s.actName
	s.flushed = x.records()
	s.xmu.Unlock()
	data := x.encode()
	if err := writeFileAtomic(indexPath(filepath.Join(s.cfg.Dir, name)), data); err != nil {
		return err
	}
	sum := x.summaryOf(name, s.size)
	sum.sum = indexSum(data)
	// The segment's last record is the chain's head until the new segment opens.
	last, head := s.seq, s.prev
	if err := s.openSegment(why, &sum); err != nil {
		return err
	}
	if err := s.appendSeal(indexSeal{Node: s.cfg.Node, Segment: name, Last: last, Head: head, Sum: sum.sum}); err != nil {
		return err
	}
	return s.retain()
}

// appendSeal writes the seal of a sealed segment's index (signed when the trail has a key).
func (s *FileSink) appendSeal(seal indexSeal) error {
	r, err := sealRecord(seal, s.cfg.Signer)
	if err != nil {
		return err
	}
	return s.appendOwn(r)
}

// retain deletes the sealed segments retention no longer keeps, oldest first, and records what
// it deleted and why.
func (s *FileSink) retain() error {
	if s.cfg.KeepFor == 0 && s.cfg.KeepBytes == 0 {
		return nil
	}
	s.xmu.RLock()
	sealed := slices.Clone(s.sealed)
	s.xmu.RUnlock()
	total := s.size
	for _, g := range sealed {
		total += g.Bytes
	}
	now := s.cfg.clock()
	n, why := 0, ""
	for _, g := range sealed {
		old := s.cfg.KeepFor > 0 && !g.To.IsZero() && now.Sub(g.To) > s.cfg.KeepFor
		big := s.cfg.KeepBytes > 0 && total > s.cfg.KeepBytes
		if !old && !big {
			break // segments are in age order: the next is newer still
		}
		why = fmt.Sprintf("the trail was over audit.keep_bytes (%d bytes)", s.cfg.KeepBytes)
		if old {
			why = fmt.Sprintf("older than audit.keep_for (%s)", s.cfg.KeepFor)
		}
		total -= g.Bytes
		n++
	}
	if n == 0 {
		return nil
	}
	gone := sealed[:n]
	// The last record deleted: its hash is the prev of the first record kept.
	var through uint64
	var head string
	for i := n - 1; i >= 0 && through == 0; i-- {
		if gone[i].Records > 0 {
			r, err := readRecordAt(filepath.Join(s.cfg.Dir, gone[i].Name), gone[i].lastSpan)
			if err != nil {
				return err
			}
			through, head = r.Seq, r.Hash
		}
	}
	for _, g := range gone {
		path := filepath.Join(s.cfg.Dir, g.Name)
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("audit: retention: %w", err)
		}
		os.Remove(indexPath(path))
	}
	s.xmu.Lock()
	s.sealed = slices.Delete(s.sealed, 0, n)
	s.m.segments.Store(int64(len(s.sealed) + 1))
	s.xmu.Unlock()
	for _, g := range gone {
		s.m.bytes.Add(-g.Bytes)
	}
	names := gone[0].Name
	if n > 1 {
		names += " to " + gone[n-1].Name
	}
	rec := Record{Kind: KindAudit, Event: EventRetention, Through: through, Head: head,
		Reason: fmt.Sprintf("deleted %d segment(s), %s (seq %d to %d): %s", n, names, gone[0].First, gone[n-1].Last, why)}
	if err := s.appendOwn(rec); err != nil {
		return err
	}
	// A deletion is signed at once: whoever reads the trail later can tell it from an attack.
	_, err := s.checkpoint()
	return err
}

// Write queues r.
func (s *FileSink) Write(_ context.Context, r Record) error {
	if r.Time.IsZero() {
		r.Time = s.cfg.clock()
	}
	s.mu.Lock()
	switch {
	case s.err != nil:
		err := s.err
		s.mu.Unlock()
		s.m.refused.Add(1)
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	case s.closed:
		s.mu.Unlock()
		s.m.refused.Add(1)
		return fmt.Errorf("%w: closed", ErrUnavailable)
	case len(s.pending) >= s.cfg.Queue:
		s.mu.Unlock()
		s.m.refused.Add(1)
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
	defer close(s.published)
	tick := time.NewTicker(s.cfg.FlushEvery)
	defer tick.Stop()
	unflushed := false
	flush := func() {
		s.fail(s.w.Flush())
		s.xmu.Lock()
		s.flushed = s.active.records()
		s.xmu.Unlock()
		unflushed = false
	}
	// drain writes every pending record; it reports whether the sink is closed.
	drain := func() bool {
		s.mu.Lock()
		s.batch, s.pending = s.pending, s.batch[:0]
		closed := s.closed
		s.mu.Unlock()
		for i := 0; i < len(s.batch); {
			n, err := s.appendRecords(s.batch[i:min(i+indexChunk, len(s.batch))], s.cfg.SegmentBytes)
			s.fail(err)
			clear(s.batch[i : i+n]) // drop references to the strings they held
			i += n
			if s.size >= s.cfg.SegmentBytes {
				s.fail(s.seal(fmt.Sprintf("the last segment reached audit.segment_bytes (%d bytes)", s.cfg.SegmentBytes)))
			}
			if i < len(s.batch) {
				// A batch can hold thousands of records, milliseconds of work: between
				// chunks the traffic that writes them runs, so a query or request on a
				// busy core waits for one chunk at most, not for the whole batch.
				runtime.Gosched()
			}
		}
		unflushed = unflushed || len(s.batch) > 0
		return closed
	}
	for {
		select {
		case <-s.wake:
			if drain() {
				if s.seq > s.lastSigned {
					_, err := s.checkpoint()
					s.fail(err)
				}
				flush()
				s.fail(s.f.Sync())
				s.fail(s.f.Close())
				return
			}
		case now := <-tick.C:
			if unflushed {
				flush()
			}
			if s.seq > s.lastSigned && now.Sub(s.lastCkpt) >= s.cfg.CheckpointEvery {
				_, err := s.checkpoint()
				s.fail(err)
				flush()
			}
			if s.active.records() > 1 && now.Sub(s.opened) >= s.cfg.SegmentAge {
				s.fail(s.seal(fmt.Sprintf("the last segment was open for audit.segment_age (%s)", s.cfg.SegmentAge)))
				flush()
			} else if s.cfg.KeepFor > 0 && now.Sub(s.lastRetain) >= time.Minute {
				s.lastRetain = now
				s.fail(s.retain())
				flush()
			}
		case reply := <-s.flushes:
			// Everything accepted before the request is pending now.
			drain()
			flush()
			reply <- s.Err()
		case reply := <-s.checkpoints:
			drain()
			c, err := s.checkpoint()
			flush()
			reply <- checkpointReply{c, err}
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

// ErrNoSigner is Checkpoint's error on a trail opened without a key.
var ErrNoSigner = errors.New("audit: this trail signs no checkpoints (it has no key)")

// Checkpointer is met by sinks that sign checkpoints on request.
type Checkpointer interface {
	Checkpoint(ctx context.Context) (Checkpoint, error)
}

// Checkpoint writes every record accepted before the call and signs a checkpoint over them (or
// returns the last one, when nothing was written since). A pool calls it when a lease ends, so
// everything the lease did is covered at once.
func (s *FileSink) Checkpoint(ctx context.Context) (Checkpoint, error) {
	if s.cfg.Signer == nil {
		return Checkpoint{}, ErrNoSigner
	}
	reply := make(chan checkpointReply, 1)
	select {
	case s.checkpoints <- reply:
	case <-s.done:
		return Checkpoint{}, fmt.Errorf("%w: closed", ErrUnavailable)
	case <-ctx.Done():
		return Checkpoint{}, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.c, r.err
	case <-ctx.Done():
		return Checkpoint{}, ctx.Err()
	}
}

// checkpoint signs the head of the chain and appends the checkpoint record.
func (s *FileSink) checkpoint() (Checkpoint, error) {
	if s.cfg.Signer == nil || s.seq == 0 {
		return Checkpoint{}, nil
	}
	c, err := signCheckpoint(Checkpoint{Node: s.cfg.Node, Seq: s.seq, Head: s.prev, Time: s.cfg.clock()}, s.cfg.Signer)
	if err != nil {
		return c, err
	}
	if err := s.appendOwn(Record{Kind: KindAudit, Event: EventCheckpoint, Note: string(c.Note)}); err != nil {
		return c, err
	}
	s.lastSigned, s.lastCkpt = s.seq, time.Now()
	s.m.checkpoints.Add(1)
	s.m.lastCheckpoint.Store(s.lastCkpt.Unix())
	if s.cfg.OnCheckpoint != nil {
		select {
		case <-s.published: // replaced by the newer one
		default:
		}
		s.published <- c
	}
	return c, nil
}

// appendOwn writes a record of the trail's own.
func (s *FileSink) appendOwn(r Record) error {
	r.Time, r.Node = s.cfg.clock(), s.cfg.Node
	_, err := s.appendRecords([]Record{r}, math.MaxInt64)
	return err
}

// indexChunk bounds the records appendRecords indexes under one hold of the index's lock, so a
// query waits for at most that many (tens of microseconds) to take its view.
const indexChunk = 256

// appendRecords writes recs to the active segment in order, stopping after the one that brings
// it to full bytes, and indexes those it wrote: the index's lock and the counters are taken once
// per call, not once per record. It returns how many of recs it took and the first write error
// (a record that could not be written still took its seq, as before, and is not indexed). Only
// the writer loop seals a full segment, after a queued record: the trail's own records never
// start a new one, so sealing, retention and checkpoints cannot call each other without end.
func (s *FileSink) appendRecords(recs []Record, full int64) (int, error) {
	spans := s.spans[:0]
	var err error
	n, from := 0, s.size
	for n < len(recs) && (n == 0 || s.size < full) {
		line := s.line(&recs[n])
		n++
		if _, werr := s.w.Write(line); werr != nil {
			err = cmp.Or(err, werr)
			spans = append(spans, [2]int64{-1, -1})
			continue
		}
		spans = append(spans, [2]int64{s.size, s.size + int64(len(line))})
		s.size += int64(len(line))
	}
	s.spans = spans
	written := 0
	s.xmu.Lock()
	for i, sp := range spans {
		if sp[0] >= 0 {
			s.active.add(&recs[i], sp[0], sp[1])
			written++
		}
	}
	s.xmu.Unlock()
	s.m.written.Add(uint64(written))
	s.m.bytes.Add(s.size - from)
	for i := range n {
		s.m.leases.observe(&recs[i])
	}
	return n, err
}

// line gives r the next seq and its link in the chain and returns its line of the trail (valid
// until the next call).
func (s *FileSink) line(r *Record) []byte {
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
	return line
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

// Close writes what is queued, signs a last checkpoint, and closes the file.
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

// Written is the seq of the last record on the file (what a query sees).
func (s *FileSink) Written() uint64 {
	s.xmu.RLock()
	defer s.xmu.RUnlock()
	if s.flushed > 0 {
		return s.active.Seqs[s.flushed-1]
	}
	if n := len(s.sealed); n > 0 {
		return s.sealed[n-1].Last
	}
	return 0
}

// Dir is the directory the trail is written in.
func (s *FileSink) Dir() string { return s.cfg.Dir }

// readRecordAt reads and checks the record on the line that starts the byte span of a segment.
func readRecordAt(path string, span [2]uint32) (Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return Record{}, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	buf := make([]byte, span[1]-span[0])
	if _, err := f.ReadAt(buf, int64(span[0])); err != nil && err != io.EOF {
		return Record{}, fmt.Errorf("audit: %s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(buf), "\n")
	r, _, err := checkLine([]byte(line), nil)
	if err != nil {
		return Record{}, fmt.Errorf("audit: %s: %w", path, err)
	}
	return r, nil
}

// Stats are the trail's counters at one moment, for its metrics (package audit/auditmetrics).
type Stats struct {
	// Written and Refused count the records written and those the trail refused (queue full,
	// closed or broken); Checkpoints the checkpoints signed, the last at LastCheckpoint (zero:
	// none yet).
	Written, Refused, Checkpoints uint64
	LastCheckpoint                time.Time
	// Segments and Bytes are what the trail keeps on disk.
	Segments, Bytes int64
}

// Stats reads the trail's counters without a lock. Safe for concurrent use.
func (s *FileSink) Stats() Stats {
	st := Stats{Written: s.m.written.Load(), Refused: s.m.refused.Load(), Checkpoints: s.m.checkpoints.Load(),
		Segments: s.m.segments.Load(), Bytes: s.m.bytes.Load()}
	if t := s.m.lastCheckpoint.Load(); t != 0 {
		st.LastCheckpoint = time.Unix(t, 0)
	}
	return st
}

// EachLease calls fn with the denials and flagged records the trail wrote for each live lease
// (see leaseCounts), holding the counts' lock: fn must not call back into the sink. Safe for
// concurrent use.
func (s *FileSink) EachLease(fn func(tenant, lease string, denials, flagged uint64)) {
	s.m.leases.each(fn)
}
