package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"
)

// The fields a segment's index keeps postings for: a query naming one of them reads only the
// records that have its value. Every other filter (time, flagged, seq) is applied to what the
// indexed ones leave, and every filter is checked again on the decoded record: the index only
// narrows what is read, it never decides what is served.
const (
	fieldLease = iota
	fieldTask
	fieldTenant
	fieldHost
	fieldKind
	fieldDecision
	fieldRule
	fieldEvent
	fieldFlagged
	nFields
)

// fieldValues returns r's value of each indexed field ("" for none).
func fieldValues(r *Record) [nFields]string {
	host := r.Host
	if host == "" && r.Kind == KindDNS {
		host = r.QName
	}
	host = normalHost(host)
	flagged := ""
	if r.Flagged {
		flagged = "true"
	}
	return [nFields]string{r.Lease, r.Task, r.Tenant, host, string(r.Kind), string(r.Decision), string(r.Rule), string(r.Event), flagged}
}

// blockSize is how many records share one entry of the time index.
const blockSize = 512

// index is what a segment's index holds: for record i of the segment, its seq and the byte
// offset where its line starts (Offsets has one more entry: where the last line ends; a record's
// line is the first line of the span up to the next offset); the time range of each block of blockSize records; and for each indexed
// field, the records holding each value, in order.
//
// The writer appends to the active segment's index as records are written; a query takes a view
// (see view) under the segment's lock and reads it without one, which is safe because appends
// never change what a view already holds.
type index struct {
	Seqs     []uint64
	Offsets  []uint32
	Blocks   []timeRange // per block of blockSize records
	Postings [nFields]map[string]*[]uint32
	Node     string // the node named by the segment's opening record
	// Counts, filled by decodeIndex, is how many records hold each value of each field.
	Counts [nFields]map[string]int
	// hot is, per field, the value of the last record added and its postings: consecutive
	// records mostly share their tenant, kind, decision and lease, and the writer then skips the
	// map.
	hot [nFields]hotPosting
	// leases tallies each lease's records (see LeaseSummary); hotLease is the last one added to.
	leases   map[string]*leaseTally
	hotLease *leaseTally
	// Bad lists the lines left out because they failed their own check (only in an index
	// rebuilt from a damaged segment: the writer writes none), so every answer can say so.
	Bad []Problem
}

type hotPosting struct {
	v string
	p *[]uint32
}

type timeRange struct{ Min, Max int64 } // unix nanoseconds

func newIndex() *index {
	x := &index{Offsets: []uint32{0}, leases: map[string]*leaseTally{}}
	for i := range x.Postings {
		x.Postings[i] = map[string]*[]uint32{}
	}
	return x
}

// posting returns the records holding value v of field f.
func (x *index) posting(f int, v string) []uint32 {
	if p := x.Postings[f][v]; p != nil {
		return *p
	}
	return nil
}

// records is how many records the index covers.
func (x *index) records() int { return len(x.Seqs) }

// first and last are the seqs of the first and last record (0 for none).
func (x *index) first() uint64 {
	if len(x.Seqs) == 0 {
		return 0
	}
	return x.Seqs[0]
}

func (x *index) last() uint64 {
	if len(x.Seqs) == 0 {
		return 0
	}
	return x.Seqs[len(x.Seqs)-1]
}

// lastSpan is the byte span of the last record's line (zero for none).
func (x *index) lastSpan() [2]uint32 {
	n := x.records()
	if n == 0 {
		return [2]uint32{}
	}
	return [2]uint32{x.Offsets[n-1], x.Offsets[n]}
}

// timeSpan is the earliest and latest record time.
func (x *index) timeSpan() (time.Time, time.Time) {
	if len(x.Blocks) == 0 {
		return time.Time{}, time.Time{}
	}
	lo, hi := x.Blocks[0].Min, x.Blocks[0].Max
	for _, b := range x.Blocks[1:] {
		lo, hi = min(lo, b.Min), max(hi, b.Max)
	}
	return time.Unix(0, lo), time.Unix(0, hi)
}

// add indexes r, whose line runs from byte start to byte end (after its newline) of the segment.
func (x *index) add(r *Record, start, end int64) {
	i := uint32(x.records())
	if last := len(x.Offsets) - 1; x.Offsets[last] != uint32(start) {
		// A line that did not verify lies between (only when an index is rebuilt). The writer
		// never gets here, so a view never sees an entry change.
		x.Offsets[last] = uint32(start)
	}
	x.Offsets = append(x.Offsets, uint32(end))
	x.Seqs = append(x.Seqs, r.Seq)
	t := r.Time.UnixNano()
	if int(i)%blockSize == 0 {
		x.Blocks = append(x.Blocks, timeRange{t, t})
	} else {
		b := &x.Blocks[len(x.Blocks)-1]
		b.Min, b.Max = min(b.Min, t), max(b.Max, t)
	}
	vals := fieldValues(r)
	for f, v := range vals {
		if v == "" {
			continue
		}
		h := &x.hot[f]
		if h.p == nil || h.v != v {
			p := x.Postings[f][v]
			if p == nil {
				p = new([]uint32)
				x.Postings[f][v] = p
			}
			h.v, h.p = v, p
		}
		*h.p = append(*h.p, i)
	}
	if r.Lease != "" {
		t := x.hotLease
		if t == nil || t.Lease != r.Lease {
			if t = x.leases[r.Lease]; t == nil {
				t = &leaseTally{}
				x.leases[r.Lease] = t
			}
			x.hotLease = t
		}
		t.add(r, vals[fieldHost])
	}
	if r.Kind == KindAudit && r.Event == EventSegment && x.Node == "" {
		x.Node = r.Node
	}
}

// view copies the slice headers of x, so the copy can be read while the writer appends to x.
// Postings are copied only for the fields and values asked for.
func (x *index) view(want [nFields]string) *index {
	// The last block's range still widens as records arrive: the view takes a copy.
	v := &index{Seqs: x.Seqs, Offsets: x.Offsets, Blocks: slices.Clone(x.Blocks), Node: x.Node}
	for f, val := range want {
		if val != "" {
			v.Postings[f] = map[string]*[]uint32{val: {}}
			if p := x.Postings[f][val]; p != nil {
				*v.Postings[f][val] = *p
			}
		}
	}
	return v
}

// The index file: "AIDX3\n", then the body, then the SHA-256 of everything before it. The body is
// uvarints and length-prefixed strings: node, record count, the seqs and the offsets as deltas,
// the blocks, then per field the number of values and, for each value in sorted order, the value
// and its postings as deltas, then the lines left out, then the lease tallies in lease order (see
// encodeTally). An index of an earlier version is rebuilt from its segment. The encoding is deterministic, so verification can rebuild a
// segment's index from its records and compare bytes.
const indexMagic = "AIDX3\n"

func (x *index) encode() []byte {
	b := []byte(indexMagic)
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	s := func(v string) { u(uint64(len(v))); b = append(b, v...) }
	s(x.Node)
	u(uint64(x.records()))
	prev := uint64(0)
	for _, q := range x.Seqs {
		u(q - prev)
		prev = q
	}
	u(uint64(x.Offsets[0]))
	for i := 1; i < len(x.Offsets); i++ {
		u(uint64(x.Offsets[i] - x.Offsets[i-1]))
	}
	u(uint64(len(x.Blocks)))
	for _, bl := range x.Blocks {
		b = binary.AppendVarint(b, bl.Min)
		u(uint64(bl.Max - bl.Min))
	}
	for f := range x.Postings {
		m := x.Postings[f]
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		u(uint64(len(keys)))
		var enc []byte
		for _, k := range keys {
			s(k)
			p := *m[k]
			u(uint64(len(p)))
			enc = enc[:0]
			prev := uint32(0)
			for _, o := range p {
				enc = binary.AppendUvarint(enc, uint64(o-prev))
				prev = o
			}
			u(uint64(len(enc)))
			b = append(b, enc...)
		}
	}
	u(uint64(len(x.Bad)))
	for _, p := range x.Bad {
		u(uint64(p.Line))
		u(p.Seq)
		s(p.Reason)
	}
	ids := keysOfMap(x.leases)
	u(uint64(len(ids)))
	for _, id := range ids {
		b = x.leases[id].encode(b)
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

var errIndex = errors.New("index unreadable")

// decodeIndex reads an index file's bytes. Postings are decoded only for the fields where want
// names a value (all of them when all is set): the others are skipped by their length, which is
// what keeps opening one segment's index for a one-lease query cheap. Counts has, for every
// field, each value and how many records hold it.
func decodeIndex(data []byte, want [nFields]string, all bool) (*index, error) {
	if len(data) < len(indexMagic)+sha256.Size || !bytes.HasPrefix(data, []byte(indexMagic)) {
		return nil, errIndex
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, fmt.Errorf("%w: checksum does not match", errIndex)
	}
	return decodeChecked(data, want, all)
}

// decodeChecked is decodeIndex for bytes whose checksum was checked already (see indexCache).
func decodeChecked(data []byte, want [nFields]string, all bool) (*index, error) {
	if len(data) < len(indexMagic)+sha256.Size || !bytes.HasPrefix(data, []byte(indexMagic)) {
		return nil, errIndex
	}
	d := decoder{b: data[len(indexMagic) : len(data)-sha256.Size]}
	x := &index{Node: d.s()}
	n := d.u()
	if n > uint64(len(d.b)) {
		return nil, errIndex
	}
	x.Seqs = make([]uint64, n)
	prev := uint64(0)
	for i := range x.Seqs {
		prev += d.u()
		x.Seqs[i] = prev
	}
	x.Offsets = make([]uint32, n+1)
	x.Offsets[0] = uint32(d.u())
	for i := uint64(1); i <= n; i++ {
		x.Offsets[i] = x.Offsets[i-1] + uint32(d.u())
	}
	// Whoever can write the index file can also fix its checksum: everything a query indexes
	// by is checked to be in range, so a forged index can hide records (audit verify catches
	// that), never crash a query.
	nb := d.u()
	if nb != (n+blockSize-1)/blockSize {
		return nil, fmt.Errorf("%w: %d time blocks for %d records", errIndex, nb, n)
	}
	x.Blocks = make([]timeRange, nb)
	for i := range x.Blocks {
		lo := d.v()
		x.Blocks[i] = timeRange{lo, lo + int64(d.u())}
	}
	for f := range x.Postings {
		x.Postings[f] = map[string]*[]uint32{}
		x.Counts[f] = map[string]int{}
		nk := d.u()
		for range nk {
			if d.err != nil {
				break
			}
			k, np, nbytes := d.s(), d.u(), d.u()
			if np > n || nbytes > uint64(len(d.b)) {
				return nil, errIndex
			}
			x.Counts[f][k] = int(np)
			if !all && want[f] != k {
				d.b = d.b[nbytes:]
				continue
			}
			p := make([]uint32, np)
			pd := decoder{b: d.b[:nbytes]}
			prev := uint64(0)
			for j := range p {
				delta := pd.u()
				if j > 0 && delta == 0 {
					return nil, fmt.Errorf("%w: postings out of order", errIndex)
				}
				prev += delta
				if prev >= n {
					return nil, fmt.Errorf("%w: a posting past the last record", errIndex)
				}
				p[j] = uint32(prev)
			}
			if pd.err != nil || len(pd.b) != 0 {
				return nil, errIndex
			}
			d.b = d.b[nbytes:]
			x.Postings[f][k] = &p
		}
	}
	nbad := d.u()
	if nbad > n+uint64(len(d.b)) {
		return nil, errIndex
	}
	for range nbad {
		x.Bad = append(x.Bad, Problem{Line: int(d.u()), Seq: d.u(), Reason: d.s()})
	}
	nl := d.u()
	if nl > n {
		return nil, fmt.Errorf("%w: %d lease tallies for %d records", errIndex, nl, n)
	}
	x.leases = make(map[string]*leaseTally, nl)
	for range nl {
		t, err := d.tally()
		if err != nil {
			return nil, err
		}
		x.leases[t.Lease] = t
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errIndex
	}
	return x, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) u() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err, d.b = errIndex, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

// v reads a signed varint: binary.Varint is the zigzag form of Uvarint.
func (d *decoder) v() int64 {
	u := d.u()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) s() string {
	n := d.u()
	if n > uint64(len(d.b)) {
		d.err, d.b = errIndex, nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// segmentSummary is what the trail keeps in memory for each sealed segment: its ranges, and how
// many records hold each value of each indexed field, so a query skips every segment that cannot
// hold what it asks for without opening its index.
type segmentSummary struct {
	Name        string
	First, Last uint64
	From, To    time.Time
	Records     int
	Bytes       int64
	Node        string
	Counts      [nFields]map[string]int // nil for a field with more than maxSummaryValues values
	Leases      []LeaseSummary          // the segment's lease tallies, in lease order
	Bad         []Problem
	lastSpan    [2]uint32 // the byte span of the last record's line
	// sum is the SHA-256 the segment's index file must end with for a query to read it: the
	// one its seal covers, or the one the node wrote and seals. Unused when mem is set.
	sum [sha256.Size]byte
	// mem is the segment's index rebuilt from its records, queried in place of the file when
	// the file cannot be trusted (see openSegments).
	mem *index
}

// maxSummaryValues bounds the values of one field a segment's summary keeps in memory. Hosts are
// what a sandbox picks (a million distinct names asked is a million values): a field with more
// keeps none, and a query on it opens the segment's index instead of skipping by the summary.
const maxSummaryValues = 4096

func (x *index) summaryOf(name string, size int64) segmentSummary {
	from, to := x.timeSpan()
	g := segmentSummary{Name: name, First: x.first(), Last: x.last(), From: from, To: to, Records: x.records(), Bytes: size, Node: x.Node}
	for _, p := range x.Bad {
		p.Segment = name
		g.Bad = append(g.Bad, p)
	}
	for f := range g.Counts {
		switch {
		case len(x.Postings[f]) > maxSummaryValues || len(x.Counts[f]) > maxSummaryValues:
			// nil: may hold any value
		case x.Counts[f] != nil:
			g.Counts[f] = x.Counts[f]
		default:
			g.Counts[f] = make(map[string]int, len(x.Postings[f]))
			for v, p := range x.Postings[f] {
				g.Counts[f][v] = len(*p)
			}
		}
	}
	for _, id := range keysOfMap(x.leases) {
		g.Leases = append(g.Leases, x.leases[id].summary())
	}
	g.lastSpan = x.lastSpan()
	return g
}

// buildIndex reads the segment at path and indexes every line whose own hash verifies (a line
// that does not is left out of the index and so out of query answers; verification reports it).
func buildIndex(path string) (*index, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	x := newIndex()
	var end int64
	line := 0
	err = scanLines(f, func(b []byte, off int64, r *Record, lerr error) error {
		line++
		end = x.scanned(line, b, off, r, lerr)
		return nil
	})
	return x, end, err
}

// scanned indexes the line-th line of a segment as read back by scanLines, and returns where it
// ends. A line that does not verify, or does not come after the last one indexed (replayed,
// reordered), is left out and listed in Bad; verification says more.
func (x *index) scanned(line int, b []byte, off int64, r *Record, lerr error) int64 {
	end := off + int64(len(b)) + 1
	switch {
	case lerr != nil:
		x.Bad = append(x.Bad, Problem{Line: line, Seq: r.Seq, Reason: describeLineError(lerr)})
	case r.Seq <= x.last():
		x.Bad = append(x.Bad, Problem{Line: line, Seq: r.Seq, Reason: "out of sequence (replayed or reordered)"})
	default:
		x.add(r, off, end)
	}
	return end
}

// indexPath is the index file of the segment at path.
func indexPath(segment string) string { return segment[:len(segment)-len(segmentExt)] + indexExt }

// writeFileAtomic writes data to path through a temporary file and a rename, so a reader never
// sees half of it.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// intersect returns the values in both sorted lists.
func intersect(a, b []uint32) []uint32 {
	out := make([]uint32, 0, min(len(a), len(b)))
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}
