package audit

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// VerifyOptions say what Verify checks the trail against.
type VerifyOptions struct {
	// Verifier is the node's public checkpoint key. Without it checkpoints are counted, not
	// checked, and the report says so.
	Verifier note.Verifier
	// Latest is the node's latest checkpoint as kept off the trail (in Redis): a trail that
	// ends before it, or disagrees with it, was cut or rewritten.
	Latest []byte
	// Since limits the check to the segments holding records from then on.
	Since time.Time
	// Lease limits the check to the segments holding the lease's records.
	Lease string
}

// Report is what Verify found.
type Report struct {
	Dir                           string
	Node                          string
	Segments, SegmentsValid       int
	Records, RecordsValid         int
	Checkpoints, CheckpointsValid int
	LeaseRecords                  int // records of VerifyOptions.Lease among those checked
	// From and To are the first and last seq checked; the chain is intact between them when
	// Problems is empty.
	From, To uint64
	// FromTime and ToTime are the times of the first and last record checked.
	FromTime, ToTime time.Time
	// Covered is the seq of the last valid checkpoint: every record up to it is signed.
	Covered uint64
	// Deleted says which records retention deleted, from its signed records.
	Deleted  []string
	Problems []Problem
	// Unchecked is set when no verifier key was given.
	Unchecked bool
	// Indexes counts the sealed segments checked (every one but the last), IndexesSealed those
	// whose index a seal in the chain covers and matches their records. Unsealed names the rest
	// that are not wrong, only not covered: sealed before index seals existed, or the last
	// segment of a node that has not started since. Each was checked against its records.
	Indexes, IndexesSealed int
	Unsealed               []string
	// Skipped counts the segments Since or Lease left out, each on the strength of its sealed
	// index and only where the chain before it is signed (a segment whose index is not sealed, or
	// not the one sealed, is always checked, and so are those after a segment no signature
	// covers, up to the next signature).
	Skipped int
	// AllChecked is set when Since or Lease was asked without a verifier key: with nothing
	// signed to choose by, every segment was checked.
	AllChecked bool
}

// OK reports whether nothing was found wrong.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// String is the summary `airlock audit verify` prints, modelled on CloudTrail's validate-logs.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Trail %s (node %s)\n", r.Dir, orNone(r.Node))
	if r.Records > 0 {
		fmt.Fprintf(&b, "Results for seq %d to %d (%s to %s):\n", r.From, r.To,
			r.FromTime.UTC().Format(time.RFC3339), r.ToTime.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "%d/%d segments valid\n", r.SegmentsValid, r.Segments)
	fmt.Fprintf(&b, "%d/%d records valid\n", r.RecordsValid, r.Records)
	if r.Unchecked {
		fmt.Fprintf(&b, "%d checkpoints NOT checked (no public key given: --key)\n", r.Checkpoints)
	} else {
		fmt.Fprintf(&b, "%d/%d checkpoints valid\n", r.CheckpointsValid, r.Checkpoints)
	}
	if r.Indexes > 0 {
		fmt.Fprintf(&b, "%d/%d indexes sealed in the chain and valid\n", r.IndexesSealed, r.Indexes)
	}
	if n := len(r.Unsealed); n > 0 {
		names := r.Unsealed[0]
		if n > 1 {
			names = fmt.Sprintf("%s to %s", r.Unsealed[0], r.Unsealed[n-1])
		}
		fmt.Fprintf(&b, "%d index(es) not sealed (written before index seals, or not yet sealed by the node's next start), checked against their records: %s\n", n, names)
	}
	if r.Skipped > 0 {
		fmt.Fprintf(&b, "%d segment(s) skipped: their sealed indexes hold nothing asked for\n", r.Skipped)
	}
	if r.AllChecked {
		b.WriteString("Every segment checked: without the public key no sealed index can be trusted to skip one\n")
	}
	for _, d := range r.Deleted {
		fmt.Fprintf(&b, "Deleted by retention (signed record): %s\n", d)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "INVALID: %s\n", p)
	}
	switch {
	case r.Records == 0:
		b.WriteString("No records to check\n")
	case r.OK():
		fmt.Fprintf(&b, "Chain intact from seq %d to %d\n", r.From, r.To)
		if r.Covered < r.To && !r.Unchecked {
			fmt.Fprintf(&b, "Records after seq %d (the last checkpoint) are not yet covered by one\n", r.Covered)
		}
	default:
		fmt.Fprintf(&b, "Chain NOT intact: first problem at %s\n", r.Problems[0])
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// gap is a run of seqs missing from the chain, explained at the end by a retention record or
// reported.
type gap struct {
	problem   int // its place in Report.Problems, taken out again when retention explains it
	seg       string
	line      int
	from, to  uint64
	prev      string // the hash the record after the gap names as its prev
	atSegment bool   // the gap is at a segment's start: a whole segment is missing
}

// Verify checks the trail in dir: every record's own hash, the chain across segments, every
// checkpoint against the key, the segments' opening records and node, retention's records, the
// indexes against the records, and the tail against the latest checkpoint kept elsewhere. Every
// problem is reported for what it is, in order, and the check goes on after each.
func Verify(dir string, opt VerifyOptions) (*Report, error) {
	names, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	rep := &Report{Dir: dir, Unchecked: opt.Verifier == nil}
	if opt.Verifier != nil {
		rep.Node, _ = strings.CutPrefix(opt.Verifier.Name(), "airlock-")
	}
	// The seals are read first: they say which indexes can be trusted to choose segments by.
	seals, heads, err := readSeals(dir, names, opt.Verifier)
	if err != nil {
		return nil, err
	}
	skippable, err := selectSegments(dir, names, seals, heads, rep, opt)
	if err != nil {
		return nil, err
	}
	v := &verifier{rep: rep, opt: opt, hashes: map[uint64]string{}}
	var latest *Checkpoint
	if len(opt.Latest) > 0 && opt.Verifier != nil {
		c, err := OpenCheckpoint(opt.Latest, opt.Verifier)
		if err != nil {
			rep.Problems = append(rep.Problems, Problem{Reason: "the latest checkpoint given (from Redis): " + err.Error()})
		} else {
			latest = &c
		}
	}
	if latest != nil {
		v.watch = latest.Seq
	}
	for i, name := range names {
		// A segment is left out only where the chain before it is signed (see covered), and
		// never the one holding the record the latest checkpoint given signs, so that record is
		// compared.
		if s, ok := skippable[name]; ok && v.covered() && (v.watch < s.first || v.watch > s.last) {
			v.skip(s)
			rep.Skipped++
			continue
		}
		path := filepath.Join(dir, name)
		x, head, err := v.segment(path, name)
		if err != nil {
			return nil, err
		}
		seal, sealed := seals[name]
		if sealed && seal.Last == x.last() && seal.Head == head {
			v.sign(seal.Last) // its records, read, end with the one its seal signs
		}
		if err := v.index(path, name, x, head, i == len(names)-1, seal, sealed); err != nil {
			return nil, err
		}
		if !v.segmentProblem {
			v.rep.SegmentsValid++
		}
	}
	v.resolveGaps()
	// Problems in the order of the trail (gaps are resolved at the end).
	slices.SortStableFunc(rep.Problems, func(a, b Problem) int {
		if c := strings.Compare(a.Segment, b.Segment); c != 0 {
			return c
		}
		return lineKey(a) - lineKey(b)
	})
	if latest != nil {
		switch h, ok := v.hashes[latest.Seq]; {
		case latest.Seq > rep.To:
			rep.Problems = append(rep.Problems, Problem{Seq: rep.To,
				Reason: fmt.Sprintf("truncated tail: the trail ends at seq %d, but the node's latest checkpoint (from Redis, %s) covers seq %d",
					rep.To, latest.Time.UTC().Format(time.RFC3339), latest.Seq)})
		case ok && h != latest.Head:
			rep.Problems = append(rep.Problems, Problem{Seq: latest.Seq,
				Reason: "rewritten: the record at the seq of the node's latest checkpoint (from Redis) is not the one it signed"})
		}
	}
	return rep, nil
}

// lineKey orders a segment's problems by line, the ones about the whole segment last.
func lineKey(p Problem) int {
	if p.Line == 0 {
		return 1 << 62
	}
	return p.Line
}

// skippedSegment is a segment left out of the check, trusted by its seal: its first record (seq
// from its sealed index, prev as its file says) and its last (seq and hash, from its seal), so the
// chain is still followed across it, what is wrong with its head (see readSeals), and where to
// find a retention record in it.
type skippedSegment struct {
	name, path      string
	first, last     uint64
	firstPrev, head string
	sum             [sha256.Size]byte // its sealed index's SHA-256
	retains         bool              // its sealed index counts retention records in it
	problems        []Problem         // of its head
}

// skippedOf is the sealed segment at path, whose index x is the one seal seals and whose head is h,
// as a segment left unread.
func skippedOf(path string, x *index, seal indexSeal, h segmentHead) skippedSegment {
	return skippedSegment{name: filepath.Base(path), path: path, first: x.first(), firstPrev: h.first.Prev, last: seal.Last, head: seal.Head,
		sum: seal.Sum, retains: x.Counts[fieldEvent][string(EventRetention)] > 0, problems: h.problems}
}

// selectSegments returns the segments Since and Lease may leave out (none when neither is set;
// Verify still reads one where the chain before it is not signed). A segment is left out only on
// the strength of its sealed index, checked with the verifier key (see sealedIndex): without the
// key, and for a segment whose index is not sealed, not the one sealed or lists lines left out, or
// whose first line is not the first its index names, nothing the chain covers says what it holds,
// so it is checked. The last segment has no seal and is always checked.
func selectSegments(dir string, names []string, seals map[string]indexSeal, heads map[string]segmentHead, rep *Report, opt VerifyOptions) (map[string]skippedSegment, error) {
	if opt.Since.IsZero() && opt.Lease == "" || len(names) == 0 {
		return nil, nil
	}
	if opt.Verifier == nil {
		rep.AllChecked = true
		return nil, nil
	}
	out := map[string]skippedSegment{}
	for _, name := range names[:len(names)-1] {
		seal, sealed := seals[name]
		if !sealed {
			continue
		}
		path := filepath.Join(dir, name)
		x, err := sealedIndex(path, seal, false)
		if err != nil || len(x.Bad) > 0 || x.records() < 2 {
			continue // checked, and v.index says what is wrong with it
		}
		if _, to := x.timeSpan(); opt.Since.IsZero() || !to.Before(opt.Since) {
			if opt.Lease == "" || x.Counts[fieldLease][opt.Lease] > 0 {
				continue
			}
		}
		if h := heads[name]; h.first.Seq == x.first() {
			out[name] = skippedOf(path, x, seal, h)
		}
	}
	return out, nil
}

type verifier struct {
	rep *Report
	opt VerifyOptions
	// The last record that verified, and the hash the line after it claimed when that line
	// failed its own check (so the chain is picked up on either side of an edited line).
	prevSeq        uint64
	prevHash       string
	claimed        string
	claimedSeq     uint64
	started        bool
	gaps           []gap
	retained       []Record
	hashes         map[uint64]string // only the seq watched
	watch          uint64
	segmentProblem bool
	// skipped are the segments left out of the check so far, in order: a retention record that
	// explains a gap may be in one (see retentionIn).
	skipped []skippedSegment
	// signed is the seq up to which the chain followed so far is covered by a signature: a valid
	// checkpoint (itself included), or a seal whose segment's last record the chain reached. A
	// segment's seal vouches for its own records only: the records before it that no signature
	// covers yet are covered only by reading on to the next signature (see covered).
	signed uint64
	// waiting are the segments read whose last record awaits a signature, and sealable says, for
	// each one waited for, whether one came with no problem in the chain between (see await).
	waiting  []string
	sealable map[string]bool
}

// problem reports what is wrong at a record; no signature after it covers the segments waiting.
func (v *verifier) problem(seg string, line int, seq uint64, format string, args ...any) {
	v.report(seg, line, seq, format, args...)
	v.uncover()
}

// report reports what is wrong at a record.
func (v *verifier) report(seg string, line int, seq uint64, format string, args ...any) {
	v.rep.Problems = append(v.rep.Problems, Problem{Segment: seg, Line: line, Seq: seq, Reason: fmt.Sprintf(format, args...)})
	v.segmentProblem = true
}

// covered reports whether the chain followed so far is signed up to its last record, so a segment
// after it may be trusted by its own seal without reading it.
func (v *verifier) covered() bool { return !v.started || v.signed >= v.prevSeq }

// sign records a signature over the chain up to seq (the last record followed): every segment
// waiting is covered.
func (v *verifier) sign(seq uint64) {
	v.signed = max(v.signed, seq)
	v.settle(true)
}

// uncover records a problem in the chain: no signature after it covers the segments waiting.
func (v *verifier) uncover() { v.settle(false) }

// await waits for a signature over the segment just read, up to its last record.
func (v *verifier) await(name string) {
	v.waiting = append(v.waiting, name)
	if v.covered() {
		v.settle(true)
	}
}

// settle says of every segment waiting whether a signature covers it.
func (v *verifier) settle(covered bool) {
	if len(v.waiting) > 0 && v.sealable == nil {
		v.sealable = map[string]bool{}
	}
	for _, n := range v.waiting {
		v.sealable[n] = covered
	}
	v.waiting = v.waiting[:0]
}

// cleanSince reports whether the problems found since the before-th are none but a torn last line
// and the trail's front (which retention may explain).
func (v *verifier) cleanSince(before int) bool {
	for i, p := range v.rep.Problems[before:] {
		front := slices.ContainsFunc(v.gaps, func(g gap) bool { return g.from == 1 && g.problem == before+i })
		if !front && p.Reason != errTorn.Error() {
			return false
		}
	}
	return true
}

// segment checks one segment's records and returns the index they give and the hash of the
// last one indexed.
func (v *verifier) segment(path, name string) (*index, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	v.rep.Segments++
	v.segmentProblem = false
	rebuilt := newIndex()
	lineNo := 0
	head := ""
	err = scanLines(f, func(line []byte, off int64, r *Record, lerr error) error {
		lineNo++
		v.rep.Records++
		n := rebuilt.records()
		if rebuilt.scanned(lineNo, line, off, r, lerr); rebuilt.records() > n {
			head = r.Hash
		}
		if lerr != nil {
			if errors.Is(lerr, errTorn) {
				// A crash's mark, at the very end of the trail: nothing follows for it to break.
				v.report(name, lineNo, r.Seq, "%s", describeLineError(lerr))
			} else {
				v.problem(name, lineNo, r.Seq, "%s", describeLineError(lerr))
			}
			if r.Hash != "" {
				v.claimed, v.claimedSeq = r.Hash, r.Seq
			}
			return nil
		}
		opening := lineNo == 1 && r.Kind == KindAudit && r.Event == EventSegment && r.Segment == name
		ok := true
		if lineNo == 1 {
			ok = v.opening(name, r)
		}
		ok = v.link(name, lineNo, r, opening) && ok
		if r.Kind == KindAudit {
			switch r.Event {
			case EventCheckpoint:
				ok = v.checkpoint(name, lineNo, r) && ok
			case EventRetention:
				v.retained = append(v.retained, *r)
			case EventIndex:
				if _, err := sealOf(r, v.opt.Verifier); err != nil {
					v.problem(name, lineNo, r.Seq, "%v", err)
					ok = false
				}
			}
		}
		if ok {
			v.rep.RecordsValid++
		}
		if v.opt.Lease != "" && r.Lease == v.opt.Lease {
			v.rep.LeaseRecords++
		}
		if r.Seq == v.watch {
			v.hashes[r.Seq] = r.Hash
		}
		if v.rep.From == 0 {
			v.rep.From, v.rep.FromTime = r.Seq, r.Time
		}
		v.rep.To, v.rep.ToTime = r.Seq, r.Time
		if r.Kind != KindAudit || r.Event != EventCheckpoint {
			v.claimed = ""
		}
		v.prevSeq, v.prevHash, v.started = r.Seq, r.Hash, true
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("audit: %s: %w", path, err)
	}
	return rebuilt, head, nil
}

// index checks a segment's index file against the index its records give (x, whose last record
// has the hash head) and against its seal: an index edited to hide or invent records, swapped,
// kept from another state of the trail, deleted, or a segment rewritten after its index was
// sealed, is reported as tampering. last is set for the trail's last segment, which has no seal.
func (v *verifier) index(path, name string, x *index, head string, last bool, seal indexSeal, sealed bool) error {
	data, err := os.ReadFile(indexPath(path))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("audit: %w", err)
	}
	present := err == nil
	enc := x.encode()
	idx := filepath.Base(indexPath(path))
	if !last {
		v.rep.Indexes++
	}
	ok := true
	switch {
	case sealed && present && indexSum(data) == seal.Sum && validIndexFile(data) && !bytes.Equal(data, enc):
		// The index is the one sealed: its records changed under it. Lines that fail their
		// own check, or break the chain, are reported where they are.
		ok = false
		if !v.segmentProblem {
			v.problem(name, 0, 0, "tampered segment: its records are not the ones its index, sealed at seq %d, was made from (the segment was rewritten after it was sealed)", seal.Seq)
		}
	case present && !bytes.Equal(data, enc):
		ok = false
		v.problem(name, 0, 0, "tampered index: %s does not match the segment's records (edited, swapped with another segment's, or left from another state of the trail); a query through it could miss records or show others: delete it and the node rebuilds it at start", idx)
	case sealed && (indexSum(enc) != seal.Sum || seal.Last != x.last() || seal.Head != head):
		ok = false
		v.problem(name, 0, 0, "tampered index: the segment's records are not the ones whose index was sealed at seq %d (the segment and its index were rewritten after it was sealed)", seal.Seq)
	case sealed && !present:
		ok = false
		v.problem(name, 0, 0, "tampered index: %s, sealed at seq %d, is missing (deleted); queries read every record of the segment until the node rebuilds it at start", idx, seal.Seq)
	}
	switch {
	case !ok || last:
	case sealed:
		v.rep.IndexesSealed++
	default:
		v.rep.Unsealed = append(v.rep.Unsealed, name)
	}
	return nil
}

func describeLineError(err error) string {
	if errors.Is(err, errTorn) {
		return err.Error()
	}
	return "record fails its own check: " + err.Error()
}

// skip follows the chain across a segment left out of the check: its first record must follow
// the last record checked (a segment missing before it is a gap, as anywhere; the trail's first
// segment must start at seq 1 or where retention says), and the next one checked must follow the
// last record its seal names.
func (v *verifier) skip(s skippedSegment) {
	switch {
	case !v.started:
		v.front(s.name, 1, s.first, s.firstPrev)
	case s.first > v.prevSeq+1:
		v.gap(gap{seg: s.name, line: 1, from: v.prevSeq + 1, to: s.first - 1, prev: s.firstPrev, atSegment: true})
	case s.first != v.prevSeq+1 || s.firstPrev != v.prevHash && s.firstPrev != v.claimed:
		v.problem(s.name, 1, s.first, "chain broken: its first record (seq %d) does not follow seq %d", s.first, v.prevSeq)
	}
	v.rep.Problems = append(v.rep.Problems, s.problems...)
	v.prevSeq, v.prevHash, v.started, v.claimed = s.last, s.head, true, ""
	v.sign(s.last)
	v.skipped = append(v.skipped, s)
}

// link checks that r follows the record before it; it reports whether it does. A gap is kept
// for resolveGaps (retention may explain it); the record after a gap is itself valid.
func (v *verifier) link(name string, line int, r *Record, opening bool) bool {
	switch {
	case !v.started:
		return v.front(name, line, r.Seq, r.Prev)
	case v.claimed != "" && r.Prev == v.claimed:
		// It links to the line before, which failed its own check and is reported already.
	case r.Seq == v.prevSeq+1 && r.Prev == v.prevHash:
	case r.Seq > v.prevSeq+1:
		v.gap(gap{seg: name, line: line, from: v.prevSeq + 1, to: r.Seq - 1, prev: r.Prev, atSegment: opening})
	case r.Seq <= v.prevSeq:
		v.problem(name, line, r.Seq, "seq %d comes again after seq %d (a record replayed or reordered)", r.Seq, v.prevSeq)
		return false
	default:
		v.problem(name, line, r.Seq, "chain broken: its prev is not the hash of seq %d (a record was replaced or inserted before it)", v.prevSeq)
		return false
	}
	return true
}

// front checks the first record of the trail, at seq: the trail starts at seq 1, or later where
// retention deleted the records before (resolveGaps looks for its record, in the segments checked
// and in those left out), whatever part of the trail is checked. It reports whether the record
// is valid.
func (v *verifier) front(seg string, line int, seq uint64, prev string) bool {
	switch {
	case seq == 1 && prev == "":
	case seq == 1:
		v.problem(seg, line, seq, "chain broken: seq 1 names a record before it (the trail's first record was forged)")
		return false
	default:
		v.gap(gap{seg: seg, line: line, from: 1, to: seq - 1, prev: prev, atSegment: true})
	}
	return true
}

// opening checks a segment's first record: the trail's own, naming the segment and this node.
func (v *verifier) opening(name string, r *Record) bool {
	if r.Kind != KindAudit || r.Event != EventSegment || r.Segment != name {
		v.problem(name, 1, r.Seq, "the segment does not begin with its own opening record (it was cut at the front, renamed or assembled by hand)")
		return false
	}
	if v.rep.Node == "" {
		v.rep.Node = r.Node
	}
	if r.Node != v.rep.Node {
		v.problem(name, 1, r.Seq, "the segment is from node %q, not %q (another node's segment put in this trail)", r.Node, v.rep.Node)
		return false
	}
	return true
}

// checkpoint checks a checkpoint record against the key and the record it signs (the one before).
func (v *verifier) checkpoint(name string, line int, r *Record) bool {
	v.rep.Checkpoints++
	if v.opt.Verifier == nil {
		v.sign(r.Seq) // worth what the chain around it is worth, as every signature without the key
		return true
	}
	c, err := OpenCheckpoint([]byte(r.Note), v.opt.Verifier)
	switch {
	case err != nil:
		v.problem(name, line, r.Seq, "checkpoint %s", err)
		return false
	case v.claimed != "" && c.Seq == v.claimedSeq && c.Head == v.claimed:
		// It signs the line just before, which fails its own check: the signature is over that
		// record's hash as first written, so the edit is proven, and reported there already.
	case c.Seq != v.prevSeq:
		v.problem(name, line, r.Seq, "checkpoint signs seq %d, which is not the record before it (seq %d): the records between were deleted", c.Seq, v.prevSeq)
		return false
	case c.Head != v.prevHash:
		v.problem(name, line, r.Seq, "checkpoint signs seq %d with another head than the trail has: records after seq %d (the last one a valid signature covers) up to %d were changed and their chain rebuilt",
			c.Seq, v.signed, c.Seq)
		return false
	case c.Node != v.rep.Node:
		v.problem(name, line, r.Seq, "checkpoint is for node %q", c.Node)
		return false
	}
	v.rep.CheckpointsValid++
	v.rep.Covered = r.Seq
	v.sign(r.Seq)
	return true
}

// gap reports a run of missing seqs where it is found; resolveGaps takes the report back if a
// retention record explains it. A gap does not make the segment it is found in invalid: what is
// missing is elsewhere.
func (v *verifier) gap(g gap) {
	span := fmt.Sprintf("seq %d to %d", g.from, g.to)
	if g.from == g.to {
		span = fmt.Sprintf("seq %d", g.from)
	}
	var why string
	switch {
	case g.atSegment && g.from == 1:
		why = fmt.Sprintf("the trail starts at seq %d: %s missing and no retention record explains it (segments deleted by hand)", g.to+1, span)
	case g.atSegment:
		why = fmt.Sprintf("segment missing: %s not in the trail and no retention record explains it", span)
	default:
		why = fmt.Sprintf("records missing: %s deleted from the segment", span)
	}
	g.problem = len(v.rep.Problems)
	v.rep.Problems = append(v.rep.Problems, Problem{Segment: g.seg, Line: g.line, Seq: g.to + 1, Reason: why})
	v.gaps = append(v.gaps, g)
	if v.started {
		v.uncover() // the records before it link to nothing that follows
	}
}

// resolveGaps takes back the report of each gap a signed retention record explains (see
// retention).
func (v *verifier) resolveGaps() {
	drop := map[int]bool{}
	for _, g := range v.gaps {
		if r, ok := v.retention(g); ok {
			drop[g.problem] = true
			v.rep.Deleted = append(v.rep.Deleted, fmt.Sprintf("seq %d to %d: %s", g.from, g.to, r.Reason))
		}
	}
	kept := v.rep.Problems[:0]
	for i, p := range v.rep.Problems {
		if !drop[i] {
			kept = append(kept, p)
		}
	}
	v.rep.Problems = kept
}

// retention returns the retention record that explains gap g: one that says every record up to
// the gap's end was deleted, names the hash the record after it links to, and is itself signed
// (the node signs a checkpoint right after each deletion): a retention record appended after the
// last checkpoint is as unsigned as any record there, and anyone who can edit the trail could
// write one to explain away the segments they removed. It is looked for among the records
// checked and then in the segments left out (see retentionIn), newest first: retention deletes
// the oldest segments first, so each of its records deletes through a later seq than the one
// before, and the search stops at one that deletes less than the gap.
func (v *verifier) retention(g gap) (Record, bool) {
	for _, r := range v.retained {
		signed := v.opt.Verifier == nil || r.Seq <= v.signed
		if r.Through == g.to && r.Head == g.prev && signed {
			return r, true
		}
	}
	for i := len(v.skipped) - 1; i >= 0; i-- {
		if !v.skipped[i].retains {
			continue
		}
		if r, found, older := v.retentionIn(v.skipped[i], g); found || older {
			return r, found
		}
	}
	return Record{}, false
}

// retentionIn looks for the retention record that explains gap g in a segment left out of the
// check, through the postings of retention records in its sealed index, newest first. Each is
// read and checked on its own hash, and trusted only when the record after it is the checkpoint
// the node signs right after every deletion, signing it (without the key, as it is).
// older is set at a record that deletes less than the gap.
func (v *verifier) retentionIn(s skippedSegment, g gap) (r Record, found, older bool) {
	data, err := os.ReadFile(indexPath(s.path))
	if err != nil || indexSum(data) != s.sum {
		return r, false, false // changed since it was chosen: nothing in it is trusted now
	}
	var want [nFields]string
	want[fieldEvent] = string(EventRetention)
	x, err := decodeIndex(data, want, false)
	if err != nil {
		return r, false, false
	}
	at := func(o int) (Record, error) {
		if o+1 >= len(x.Offsets) || x.Offsets[o+1] < x.Offsets[o] || x.Offsets[o+1]-x.Offsets[o] > maxLine {
			return Record{}, errIndex
		}
		return readRecordAt(s.path, [2]uint32{x.Offsets[o], x.Offsets[o+1]})
	}
	p := x.posting(fieldEvent, string(EventRetention))
	for j := len(p) - 1; j >= 0; j-- {
		o := int(p[j])
		r, err := at(o)
		switch {
		case err != nil || r.Seq != x.Seqs[o] || r.Kind != KindAudit || r.Event != EventRetention:
			continue
		case r.Through < g.to:
			return r, false, true
		case r.Through != g.to || r.Head != g.prev:
			continue
		}
		if v.opt.Verifier == nil {
			return r, true, false // as every retention record without the key (see retention)
		}
		c, err := at(o + 1)
		if err != nil || c.Kind != KindAudit || c.Event != EventCheckpoint || c.Prev != r.Hash {
			continue
		}
		if cp, err := OpenCheckpoint([]byte(c.Note), v.opt.Verifier); err == nil && cp.Seq == r.Seq && cp.Head == r.Hash && cp.Node == v.rep.Node {
			return r, true, false
		}
	}
	return Record{}, false, false
}
