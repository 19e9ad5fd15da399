package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Query selects records. Every field set must match (an empty one matches anything); Tenant is
// set by whoever serves a tenant, never taken from the tenant's own request.
type Query struct {
	Lease, Task, Tenant, Host, Kind, Decision, Rule, Event string
	Flagged                                                bool
	// Since and Until bound the record's time (inclusive; zero: unbounded).
	Since, Until time.Time
	// After is the cursor: only records with a greater seq. A page's Next is the next page's
	// After.
	After uint64
	// Limit bounds the records returned (zero: no bound).
	Limit int
}

// Page bounds of a query read from a request: DefaultPage records when it names no limit, at
// most MaxPage.
const (
	DefaultPage = 1000
	MaxPage     = 10000
)

// ParseQuery reads a query's filters from a URL's parameters, as GET /v1/audit and the review
// page take them: lease, task, kind, decision, rule, host, event, flagged, since and until (RFC
// 3339 times, or durations back from now), after (the cursor) and limit (DefaultPage when
// absent, at most MaxPage). The tenant is never read: whoever serves a tenant sets it.
func ParseQuery(v url.Values, now time.Time) (Query, error) {
	q := Query{Lease: v.Get("lease"), Task: v.Get("task"), Kind: v.Get("kind"), Decision: v.Get("decision"),
		Rule: v.Get("rule"), Host: v.Get("host"), Event: v.Get("event"), Limit: DefaultPage}
	if d := q.Decision; d != "" && d != string(Allow) && d != string(Deny) {
		return q, fmt.Errorf("decision %q is not allow or deny", d)
	}
	if k := Kind(q.Kind); k != "" && k != KindHTTP && k != KindDNS && k != KindExec &&
		k != KindLease && k != KindFile && k != KindAudit {
		return q, fmt.Errorf("kind %q is not http, dns, exec, lease, file or audit", q.Kind)
	}
	switch v.Get("flagged") {
	case "", "false":
	case "true":
		q.Flagged = true
	default:
		return q, fmt.Errorf("flagged %q is not true or false", v.Get("flagged"))
	}
	var err error
	if q.Since, err = timeParam("since", v.Get("since"), now); err != nil {
		return q, err
	}
	if q.Until, err = timeParam("until", v.Get("until"), now); err != nil {
		return q, err
	}
	if a := v.Get("after"); a != "" {
		if q.After, err = strconv.ParseUint(a, 10, 64); err != nil {
			return q, fmt.Errorf("after %q is not a cursor (a seq from the last page's next)", a)
		}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxPage {
			return q, fmt.Errorf("limit %q is not 1 to %d", l, MaxPage)
		}
		q.Limit = n
	}
	return q, nil
}

// timeParam reads an RFC 3339 time, or a duration back from now.
func timeParam(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%s %q is neither an RFC 3339 time nor a duration back from now", name, v)
	}
	return now.Add(-d), nil
}

// Result says where an answer stopped.
type Result struct {
	// Next is the seq of the last record returned (the cursor for the next page), or the
	// query's After when none was.
	Next uint64
	// More is set when the answer stopped at Limit: a next page may hold more.
	More bool
	// Problems are records the index pointed to that failed their own check (edited, torn);
	// they are left out of the answer.
	Problems []Problem
}

// indexed returns the query's value of each indexed field.
func (q Query) indexed() [nFields]string {
	var want [nFields]string
	want[fieldLease], want[fieldTask], want[fieldTenant] = q.Lease, q.Task, q.Tenant
	want[fieldHost] = normalHost(q.Host)
	want[fieldKind], want[fieldDecision], want[fieldRule], want[fieldEvent] = q.Kind, q.Decision, q.Rule, q.Event
	if q.Flagged {
		want[fieldFlagged] = "true"
	}
	return want
}

// Matches reports whether r is one the query selects. It is the one test of that: the index only
// narrows which records are read, and every record read is tested here.
func (q Query) Matches(r *Record) bool {
	if !hasValues(q.indexed(), r) {
		return false
	}
	t := r.Time
	return r.Seq > q.After && (q.Since.IsZero() || !t.Before(q.Since)) && (q.Until.IsZero() || !t.After(q.Until))
}

// hasValues reports whether r has each value want names.
func hasValues(want [nFields]string, r *Record) bool {
	have := fieldValues(r)
	for f := range want {
		if want[f] != "" && want[f] != have[f] {
			return false
		}
	}
	return true
}

// normalHost is the form hosts are indexed and compared in: lower case, without a final dot, so a
// DNS question for "Pkg.Example." and a request to "pkg.example" are the same host.
// NormalHost is a host as the index keeps it: lower case, without a final dot.
func NormalHost(h string) string { return normalHost(h) }

func normalHost(h string) string {
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// segView is one segment as a query sees it: a sealed one by its summary (its index is read
// from disk, and checked against its seal, if the summary says it may hold matches), the active
// one by a view of its index, and one whose index file cannot be trusted by the index rebuilt
// from its records when the trail was opened.
type segView struct {
	path  string
	sum   segmentSummary
	live  *index // the active segment's index, or a rebuilt one (see segmentSummary.mem), or nil
	n     int    // records of live that are on the file
	cache *indexCache
}

// sealedView is the view of a sealed segment of the trail in dir.
func sealedView(dir string, g segmentSummary, cache *indexCache) segView {
	sv := segView{path: filepath.Join(dir, g.Name), sum: g, cache: cache}
	if g.mem != nil {
		sv.live, sv.n = g.mem, g.mem.records()
	}
	return sv
}

// errStop ends a scan early without being an error.
var errStop = errors.New("stop")

// query answers q over segs, oldest first, calling fn for each record that matches.
func query(ctx context.Context, segs []segView, q Query, fn func(Record) error) (Result, error) {
	res := Result{Next: q.After}
	for _, sv := range segs {
		res.Problems = append(res.Problems, sv.sum.Bad...)
	}
	want := q.indexed()
	sent := 0
	var buf []byte
	for _, sv := range segs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		x, problems, err := sv.candidates(q, want)
		if err != nil {
			return res, err
		}
		res.Problems = append(res.Problems, problems...)
		if x == nil {
			continue
		}
		f, err := os.Open(sv.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("audit: %w", err)
		}
		err = x.each(q, want, func(o int) error {
			start, end := x.Offsets[o], x.Offsets[o+1]
			if end < start || end-start > maxLine {
				res.Problems = append(res.Problems, Problem{Segment: filepath.Base(sv.path), Seq: x.Seqs[o], Reason: "the index gives it no readable span"})
				return nil
			}
			if need := int(end - start); cap(buf) < need {
				buf = make([]byte, need)
			} else {
				buf = buf[:need]
			}
			n, rerr := f.ReadAt(buf, int64(start))
			if rerr != nil && rerr != io.EOF {
				return fmt.Errorf("audit: %s: %w", sv.path, rerr)
			}
			line := buf[:n]
			if i := indexByte(line, '\n'); i >= 0 {
				line = line[:i]
			}
			r, _, lerr := checkLine(line, nil)
			if lerr != nil {
				res.Problems = append(res.Problems, Problem{Segment: filepath.Base(sv.path), Seq: x.Seqs[o], Reason: lerr.Error()})
				return nil
			}
			// The index picked this record for its seq and the values asked: a record that is
			// not that one means the segment changed under its index, and is said, not skipped.
			if r.Seq != x.Seqs[o] || !hasValues(want, &r) {
				res.Problems = append(res.Problems, Problem{Segment: filepath.Base(sv.path), Seq: x.Seqs[o],
					Reason: fmt.Sprintf("tampered segment: the record where its index puts seq %d (read: seq %d) is not the one indexed there (the segment was changed after it was indexed)", x.Seqs[o], r.Seq)})
				return nil
			}
			if !q.Matches(&r) {
				return nil
			}
			if err := fn(r); err != nil {
				return err
			}
			res.Next = r.Seq
			if sent++; q.Limit > 0 && sent >= q.Limit {
				res.More = true
				return errStop
			}
			return nil
		})
		f.Close()
		if errors.Is(err, errStop) {
			return res, nil
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func indexByte(b []byte, c byte) int {
	for i, v := range b {
		if v == c {
			return i
		}
	}
	return -1
}

// candidates returns the index to read for q, or nil when the segment cannot hold a match. A
// sealed segment's index file is read only when it is the one sealed (it ends with the sealed
// hash, and its body hashes to it); otherwise the answer comes from the index rebuilt from the
// segment's records, and the problem says that the index was tampered with.
func (sv segView) candidates(q Query, want [nFields]string) (*index, []Problem, error) {
	if sv.live != nil {
		x := sv.live
		if sv.n == 0 || x.Seqs[sv.n-1] <= q.After {
			return nil, nil, nil
		}
		return x, nil, nil
	}
	g := sv.sum
	if g.Records == 0 || g.Last <= q.After || (!q.Since.IsZero() && g.To.Before(q.Since)) || (!q.Until.IsZero() && g.From.After(q.Until)) {
		return nil, nil, nil
	}
	for f, v := range want {
		if v != "" && g.Counts[f] != nil && g.Counts[f][v] == 0 {
			return nil, nil, nil
		}
	}
	if data := sv.cache.get(g.Name, g.sum); data != nil {
		x, err := decodeChecked(data, want, false)
		if err != nil {
			return nil, nil, fmt.Errorf("audit: the index of %s: %w", g.Name, err)
		}
		return x, nil, nil
	}
	why := ""
	data, err := os.ReadFile(indexPath(sv.path))
	switch {
	case errors.Is(err, os.ErrNotExist):
		if _, err := os.Stat(sv.path); errors.Is(err, os.ErrNotExist) {
			return nil, nil, nil // deleted by retention, with its index, since the query began
		}
		why = "its index is missing (deleted)"
	case err != nil:
		return nil, nil, fmt.Errorf("audit: the index of %s: %w", g.Name, err)
	case indexSum(data) != g.sum:
		why = "its index is not the one sealed (edited, swapped with another segment's, or left from another state of the trail)"
	default:
		x, err := decodeIndex(data, want, false)
		if err == nil {
			sv.cache.put(g.Name, g.sum, data)
			return x, nil, nil
		}
		why = fmt.Sprintf("its index is not the one sealed (%v)", err)
	}
	x, _, err := buildIndex(sv.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("audit: %s: %w", g.Name, err)
	}
	problems := []Problem{tamperedIndex(g.Name, why+"; this answer read every record of the segment instead")}
	for _, p := range x.Bad {
		if p.Segment = g.Name; !slices.Contains(g.Bad, p) {
			problems = append(problems, p)
		}
	}
	return x, problems, nil
}

// each calls fn with the ordinal of every record of x the index says may match q, in order.
func (x *index) each(q Query, want [nFields]string, fn func(int) error) error {
	n := x.records()
	var list []uint32
	narrowed := false
	for f, v := range want {
		if v == "" {
			continue
		}
		p := x.posting(f, v)
		if !narrowed {
			list, narrowed = p, true
		} else {
			list = intersect(list, p)
		}
	}
	// Records at or before the cursor are skipped by a search, not a scan.
	from := sort.Search(n, func(i int) bool { return x.Seqs[i] > q.After })
	since, until := int64(-1<<63), int64(1<<63-1)
	if !q.Since.IsZero() {
		since = q.Since.UnixNano()
	}
	if !q.Until.IsZero() {
		until = q.Until.UnixNano()
	}
	inTime := func(o int) bool {
		b := x.Blocks[o/blockSize]
		return b.Max >= since && b.Min <= until
	}
	if narrowed {
		start := sort.Search(len(list), func(i int) bool { return int(list[i]) >= from })
		for _, o := range list[start:] {
			if int(o) >= n {
				break
			}
			if inTime(int(o)) {
				if err := fn(int(o)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for o := from; o < n; o++ {
		if !inTime(o) {
			o = (o/blockSize+1)*blockSize - 1 // the rest of the block is outside the range too
			continue
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// Query answers q over the trail as written so far (call Flush first to include every record
// accepted), calling fn for each match, oldest first.
func (s *FileSink) Query(ctx context.Context, q Query, fn func(Record) error) (Result, error) {
	want := q.indexed()
	s.xmu.RLock()
	segs := make([]segView, 0, len(s.sealed)+1)
	for _, g := range s.sealed {
		segs = append(segs, sealedView(s.cfg.Dir, g, s.cache))
	}
	live := segView{path: filepath.Join(s.cfg.Dir, s.actName), live: s.active.view(want), n: s.flushed}
	s.xmu.RUnlock()
	live.live.Seqs, live.live.Offsets = live.live.Seqs[:live.n], live.live.Offsets[:live.n+1]
	segs = append(segs, live)
	return query(ctx, segs, q, fn)
}

// Trail is a trail directory opened for reading: by `airlock audit verify`, by tools and tests,
// on a node or off it. It never writes to the directory.
type Trail struct {
	dir  string
	segs []segView
}

// OpenTrail reads the summaries of the trail in dir. An index file is trusted only where the
// chain seals it (see seal.go; without the node's key a seal is checked on its own hash and its
// links to the records either side of it, not its signature); every other segment, the last one
// (a node may be writing it) among them, is read whole and queried through the index its
// records give, built in memory, and what is wrong with it is in every answer's problems.
func OpenTrail(dir string) (*Trail, error) {
	names, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	sums, _, err := openSegments(dir, names, openOptions{})
	if err != nil {
		return nil, err
	}
	t := &Trail{dir: dir}
	cache := newIndexCache(indexCacheBytes)
	for _, g := range sums {
		t.segs = append(t.segs, sealedView(dir, g, cache))
	}
	return t, nil
}

// Query answers q over the trail.
func (t *Trail) Query(ctx context.Context, q Query, fn func(Record) error) (Result, error) {
	return query(ctx, t.segs, q, fn)
}

// ReadDir calls fn for every record of the trail in dir that verifies on its own, oldest first.
// It is Query with no filter, for tools and tests; Verify checks the chain.
func ReadDir(dir string, fn func(Record) error) error {
	t, err := OpenTrail(dir)
	if err != nil {
		return err
	}
	res, err := t.Query(context.Background(), Query{}, fn)
	if err == nil && len(res.Problems) > 0 {
		return &TrailError{Path: dir, Problems: res.Problems}
	}
	return err
}
