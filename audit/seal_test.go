package audit

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// sealTrail writes, with the key of node "a", a trail of many sealed segments holding six leases
// (l0 to l5) of one tenant one after the other, so each lies in two or three segments, with
// denials and flagged lookups among their records and a minute between records, and returns its
// directory, its segments and the key.
func sealTrail(t *testing.T) (string, []string, note.Signer, note.Verifier) {
	t.Helper()
	signer, verifier := testKey(t, "a")
	dir := t.TempDir()
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var now atomic.Int64 // the trail's own records take the time of the last record written
	now.Store(base.UnixNano())
	s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier, SegmentBytes: 2 << 10,
		clock: func() time.Time { return time.Unix(0, now.Load()).UTC() }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 90 {
		r := Record{Time: base.Add(time.Duration(i) * time.Minute), Kind: KindHTTP, Tenant: "acme", Lease: fmt.Sprint("l", i/15),
			Decision: Allow, Rule: "scope", Host: "a.example", Path: fmt.Sprint("/", i), BytesUp: 10}
		if i%5 == 0 {
			r.Decision, r.Rule = Deny, "scope-miss"
		}
		if i%7 == 0 {
			r.Kind, r.Host, r.Path, r.QName, r.Flagged = KindDNS, "", "", "t.example.", true
		}
		now.Store(r.Time.UnixNano())
		if err := s.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			if _, err := s.Checkpoint(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := listSegments(dir)
	if len(segs) < 8 {
		t.Fatalf("only %d segments", len(segs))
	}
	return dir, segs, signer, verifier
}

// scanned is every record of the trail in dir that verifies on its own, read line by line
// without any index: what a query must answer.
func scanned(t *testing.T, dir string) []Record {
	t.Helper()
	names, _ := listSegments(dir)
	var out []Record
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		scanLines(f, func(_ []byte, _ int64, r *Record, err error) error {
			if err == nil {
				out = append(out, *r)
			}
			return nil
		})
		f.Close()
	}
	return out
}

// want is what a query answers when every record is read: the seqs of the records it selects.
func want(rs []Record, q Query) []uint64 {
	var out []uint64
	for i := range rs {
		if q.Matches(&rs[i]) {
			out = append(out, rs[i].Seq)
		}
	}
	return out
}

// tally adds up, from the records, what a lease's summary must say.
func tally(rs []Record, lease string) (records, denied, flagged int) {
	for _, r := range rs {
		if r.Lease == lease {
			records++
			if r.Decision == Deny {
				denied++
			}
			if r.Flagged {
				flagged++
			}
		}
	}
	return
}

// segmentOf returns the first sealed segment (not the last of the trail) holding a record of
// lease.
func segmentOf(t *testing.T, dir string, segs []string, lease string) string {
	t.Helper()
	for _, name := range segs[:len(segs)-1] {
		for _, l := range lines(t, filepath.Join(dir, name)) {
			if strings.Contains(l, `"lease":"`+lease+`"`) {
				return name
			}
		}
	}
	t.Fatalf("no sealed segment holds lease %s", lease)
	return ""
}

// saysTampered reports whether one of ps says that segment's index was tampered with.
func saysTampered(ps []Problem, segment string) bool {
	for _, p := range ps {
		if p.Segment == segment && strings.Contains(p.Reason, "tampered index") {
			return true
		}
	}
	return false
}

func copyDir(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(out, e.Name()), b, 0o600)
	}
	return out
}

// editIndex rewrites the index of the segment at path through edit, with a checksum that holds,
// as anyone who can write the trail can.
func editIndex(t *testing.T, path string, edit func(*index)) {
	t.Helper()
	x := readIndex(t, path)
	edit(x)
	if err := os.WriteFile(indexPath(path), x.encode(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Each way of making an index say something its records do not is reported as tampering by every
// reader: audit verify in full and for one lease or time range (which before chose segments by
// the index and said "chain intact"), a reader of the directory, and a node starting on it. The
// readers answer from the records all the same: exactly the records a scan selects, and a lease's
// tally as its records add it up.
func TestIndexTamperingIsReported(t *testing.T) {
	cases := []struct {
		name   string
		lease  string // the lease the attack hides, invents or whitewashes; "" queries by time
		last   bool   // the attack is on the last segment, which no seal covers
		tamper func(t *testing.T, dir, victim string, segs []string)
	}{
		{"an index edited to drop a lease", "l1", false, func(t *testing.T, dir, victim string, _ []string) {
			editIndex(t, filepath.Join(dir, victim), func(x *index) {
				delete(x.Postings[fieldLease], "l1")
				delete(x.leases, "l1")
			})
		}},
		{"an index edited to add a lease the segment does not hold", "l9", false, func(t *testing.T, dir, victim string, _ []string) {
			editIndex(t, filepath.Join(dir, victim), func(x *index) {
				x.Postings[fieldLease]["l9"] = &[]uint32{1, 2}
				x.leases["l9"] = &leaseTally{LeaseSummary: LeaseSummary{Lease: "l9", Tenant: "acme", Records: 2, Allowed: 2, First: x.Seqs[1], Last: x.Seqs[2]}}
			})
		}},
		{"a lease's tally edited to show it clean", "l1", false, func(t *testing.T, dir, victim string, _ []string) {
			editIndex(t, filepath.Join(dir, victim), func(x *index) {
				l := x.leases["l1"]
				l.Allowed, l.Denied, l.Flagged, l.Rules, l.ruleN, l.lastRule = l.Allowed+l.Denied, 0, 0, nil, 0, ""
			})
		}},
		{"the time span edited so a time query skips the segment", "", false, func(t *testing.T, dir, victim string, _ []string) {
			editIndex(t, filepath.Join(dir, victim), func(x *index) {
				for i := range x.Blocks {
					x.Blocks[i] = timeRange{0, 1}
				}
			})
		}},
		{"an index swapped with another segment's valid one", "l1", false, func(t *testing.T, dir, victim string, segs []string) {
			other := segs[0]
			if other == victim {
				other = segs[len(segs)-2]
			}
			b, _ := os.ReadFile(indexPath(filepath.Join(dir, other)))
			os.WriteFile(indexPath(filepath.Join(dir, victim)), b, 0o600)
		}},
		{"an old index kept: of the segment's first records only", "l1", false, func(t *testing.T, dir, victim string, _ []string) {
			p := filepath.Join(dir, victim)
			x, n := newIndex(), 0
			f, _ := os.Open(p)
			scanLines(f, func(b []byte, off int64, r *Record, err error) error {
				if n++; n <= 2 {
					x.scanned(n, b, off, r, err)
				}
				return nil
			})
			f.Close()
			os.WriteFile(indexPath(p), x.encode(), 0o600)
		}},
		{"its seal edited to cover a forged index", "l1", false, func(t *testing.T, dir, victim string, segs []string) {
			p := filepath.Join(dir, victim)
			editIndex(t, p, func(x *index) { delete(x.Postings[fieldLease], "l1"); delete(x.leases, "l1") })
			forged := indexSum(must(os.ReadFile(indexPath(p))))
			// The seal is in the segment after; its record is rewritten with a hash that holds
			// (the unkeyed rule is public), its signed note cannot be.
			next := filepath.Join(dir, segs[slices.Index(segs, victim)+1])
			ls := lines(t, next)
			var r Record
			for i, l := range ls {
				if r, _, _ = checkLine([]byte(strings.TrimSuffix(l, "\n")), nil); r.Event == EventIndex && r.Segment == victim {
					r.SHA256 = hex.EncodeToString(forged[:])
					w := &FileSink{seq: r.Seq - 1, prev: r.Prev}
					ls[i] = string(w.line(&r))
				}
			}
			put(t, next, ls)
		}},
		{"its records rewritten, the chain and every index rebuilt to match", "l1", false, func(t *testing.T, dir, victim string, segs []string) {
			rechain(t, dir, segs, func(r *Record) {
				if r.Lease == "l1" {
					r.Lease = "l7"
				}
			})
		}},
		{"an index planted beside the last segment, which no seal covers", "l5", true, func(t *testing.T, dir, victim string, _ []string) {
			p := filepath.Join(dir, victim)
			if !strings.Contains(strings.Join(lines(t, p), ""), `"lease":"l5"`) {
				t.Fatal("the last segment holds none of l5's records")
			}
			x, _, _ := buildIndex(p)
			delete(x.Postings[fieldLease], "l5")
			delete(x.leases, "l5")
			os.WriteFile(indexPath(p), x.encode(), 0o600)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, segs, signer, verifier := sealTrail(t)
			var victim string
			if c.last {
				// The last segment of a node that stopped, holding records of the lease.
				s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier})
				if err != nil {
					t.Fatal(err)
				}
				for range 3 {
					s.Write(context.Background(), Record{Kind: KindHTTP, Tenant: "acme", Lease: c.lease, Decision: Deny, Host: "a.example"})
				}
				s.Close()
				segs, _ = listSegments(dir)
				victim = segs[len(segs)-1]
			} else {
				in := c.lease
				if in == "" || in == "l9" {
					in = "l3" // a time query, and an invented lease, take a segment of l3
				}
				victim = segmentOf(t, dir, segs, in)
			}
			var q Query
			vopt := VerifyOptions{Verifier: verifier, Lease: c.lease}
			if c.lease == "" {
				// From the victim's first record on: the segments before it are skipped.
				q.Since, _ = readIndex(t, filepath.Join(dir, victim)).timeSpan()
				vopt.Since = q.Since
			} else {
				q.Lease = c.lease
			}
			// Untouched, the partial check chooses segments by their sealed indexes.
			if rep, err := Verify(dir, vopt); err != nil || !rep.OK() || rep.Skipped == 0 {
				t.Fatalf("the untouched trail, checked for %+v: %v\n%s", q, err, rep)
			}
			c.tamper(t, dir, victim, segs)
			recs := scanned(t, dir)
			wantSeqs := want(recs, q)

			for _, opt := range []VerifyOptions{{Verifier: verifier}, vopt} {
				rep, err := Verify(dir, opt)
				if err != nil {
					t.Fatal(err)
				}
				if rep.OK() || !saysTampered(rep.Problems, victim) {
					t.Fatalf("verify (lease %q, since %v) does not say %s's index was tampered with:\n%s", opt.Lease, opt.Since, victim, rep)
				}
			}

			// A reader of the directory answers from the records, and says why.
			tr, err := OpenTrail(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			res, err := tr.Query(context.Background(), q, func(r Record) error { got = append(got, r.Seq); return nil })
			if err != nil || !slices.Equal(got, wantSeqs) {
				t.Fatalf("offline query %+v: %v, want %v (%v)", q, got, wantSeqs, err)
			}
			if !c.last && !saysTampered(res.Problems, victim) {
				t.Fatalf("offline query does not say %s's index was tampered with: %v", victim, res.Problems)
			}

			// So does a node starting on it, and its lease summaries are the records' own.
			node := copyDir(t, dir)
			s, err := OpenFile(FileConfig{Dir: node, Node: "a", Verifier: verifier})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got = nil
			res, err = s.Query(context.Background(), q, func(r Record) error { got = append(got, r.Seq); return nil })
			if err != nil || !slices.Equal(got, wantSeqs) || !saysTampered(res.Problems, victim) {
				t.Fatalf("node's query %+v: %v, want %v (%v); problems %v", q, got, wantSeqs, err, res.Problems)
			}
			if c.lease != "" {
				ls, _, err := s.Leases(context.Background(), LeaseQuery{Query{Lease: c.lease}})
				n, denied, flagged := tally(recs, c.lease)
				switch {
				case err != nil:
					t.Fatal(err)
				case n == 0 && len(ls) != 0:
					t.Fatalf("the node lists lease %s, which no record holds: %+v", c.lease, ls)
				case n > 0 && (len(ls) != 1 || ls[0].Records != n || ls[0].Denied != denied || ls[0].Flagged != flagged):
					t.Fatalf("the node sums lease %s as %+v; its records hold %d, %d denied, %d flagged", c.lease, ls, n, denied, flagged)
				}
			}
			// The node neither trusts nor repairs what it found: it is left for verify to show.
			if !c.last {
				if b, err := os.ReadFile(indexPath(filepath.Join(dir, victim))); err == nil {
					if nb, _ := os.ReadFile(indexPath(filepath.Join(node, victim))); !bytes.Equal(b, nb) {
						t.Fatal("the node rewrote the tampered index")
					}
				}
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// saysProblem reports whether one of ps is about segment and says what.
func saysProblem(ps []Problem, segment, what string) bool {
	for _, p := range ps {
		if p.Segment == segment && strings.Contains(p.Reason, what) {
			return true
		}
	}
	return false
}

// A running node reads a sealed index from its file at query time: an index edited or deleted
// under it, or a record rewritten under its index, is said in the answer, which still holds
// exactly the records a scan selects.
func TestTamperingUnderARunningNode(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, path string)
		says   string
	}{
		{"its index edited to drop the lease", func(t *testing.T, path string) {
			editIndex(t, path, func(x *index) { delete(x.Postings[fieldLease], "l1") })
		}, "tampered index: its index is not the one sealed"},
		{"its index deleted", func(t *testing.T, path string) {
			os.Remove(indexPath(path))
		}, "tampered index: its index is missing"},
		{"a record of the lease rewritten in place, its own hash made right", func(t *testing.T, path string) {
			ls := lines(t, path)
			for i, l := range ls {
				if r, _, err := checkLine([]byte(strings.TrimSuffix(l, "\n")), nil); err == nil && r.Lease == "l1" {
					r.Lease = "l7" // the same length: every offset of the index still holds
					w := &FileSink{seq: r.Seq - 1, prev: r.Prev}
					ls[i] = string(w.line(&r))
					break
				}
			}
			put(t, path, ls)
		}, "tampered segment: the record where its index puts seq"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			signer, verifier := testKey(t, "a")
			dir := t.TempDir()
			s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier, SegmentBytes: 2 << 10})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 60 {
				s.Write(context.Background(), Record{Kind: KindHTTP, Tenant: "acme", Lease: fmt.Sprint("l", i/15), Decision: Deny, Host: "a.example"})
			}
			if err := s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			segs, _ := listSegments(dir)
			victim := segmentOf(t, dir, segs, "l1")
			c.tamper(t, filepath.Join(dir, victim))
			q := Query{Lease: "l1"}
			wantSeqs := want(scanned(t, dir), q)
			var got []uint64
			res, err := s.Query(context.Background(), q, func(r Record) error { got = append(got, r.Seq); return nil })
			if err != nil || !slices.Equal(got, wantSeqs) {
				t.Fatalf("query of l1: %v, want %v (%v)", got, wantSeqs, err)
			}
			if !saysProblem(res.Problems, victim, c.says) {
				t.Fatalf("the answer does not say %q of %s: %v", c.says, victim, res.Problems)
			}
		})
	}
}

// A deleted index is rebuilt from its segment only when the segment's records check and give
// back exactly the index sealed; when they were rewritten too, the node says so and never writes
// an index for them.
func TestDeletedIndex(t *testing.T) {
	t.Run("its records intact: rebuilt, and sealed as before", func(t *testing.T) {
		dir, segs, signer, verifier := sealTrail(t)
		victim := segmentOf(t, dir, segs, "l1")
		os.Remove(indexPath(filepath.Join(dir, victim)))
		rep, err := Verify(dir, VerifyOptions{Verifier: verifier})
		if err != nil || rep.OK() || !saysProblem(rep.Problems, victim, "is missing (deleted)") {
			t.Fatalf("verify with an index deleted: %v\n%s", err, rep)
		}
		offlineQueryIsWhole(t, dir, "offline query")
		s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		rep, err = Verify(dir, VerifyOptions{Verifier: verifier})
		if err != nil || !rep.OK() || rep.IndexesSealed != rep.Indexes || len(rep.Unsealed) > 0 {
			t.Fatalf("verify once the node rebuilt it: %v\n%s", err, rep)
		}
	})
	t.Run("its records rewritten: not rebuilt silently", func(t *testing.T) {
		dir, segs, _, verifier := sealTrail(t)
		victim := segmentOf(t, dir, segs, "l1")
		rechain(t, dir, segs, func(r *Record) {
			if r.Lease == "l1" {
				r.Decision = Allow
			}
		})
		os.Remove(indexPath(filepath.Join(dir, victim)))
		s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Verifier: verifier})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Query(context.Background(), Query{Lease: "l1"}, func(Record) error { return nil })
		s.Close()
		if err != nil || !saysTampered(res.Problems, victim) {
			t.Fatalf("the node's answer does not say %s was tampered with: %v %v", victim, err, res.Problems)
		}
		if _, err := os.Stat(indexPath(filepath.Join(dir, victim))); err == nil {
			t.Fatal("the node wrote an index for records that do not check")
		}
	})
}

// Retention deletes segments and their indexes; the seals of deleted segments stand in the
// chain, the indexes of the kept ones stay sealed, and an index left behind by hand is ignored.
func TestRetentionKeepsIndexesSealed(t *testing.T) {
	signer, verifier := testKey(t, "a")
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier, SegmentBytes: 4 << 10, KeepBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		s.Write(context.Background(), Record{Kind: KindHTTP, Tenant: "acme", Lease: fmt.Sprint("l", i/20), Decision: Allow, Host: "a.example"})
	}
	s.Close()
	segs, _ := listSegments(dir)
	if first := readIndex(t, filepath.Join(dir, segs[0])).first(); first < 300 {
		t.Fatalf("retention kept seq %d", first)
	}
	// The index of a deleted segment, put back beside nothing.
	b, _ := os.ReadFile(indexPath(filepath.Join(dir, segs[0])))
	os.WriteFile(filepath.Join(dir, segmentName(1)[:20]+indexExt), b, 0o600)
	rep, err := Verify(dir, VerifyOptions{Verifier: verifier})
	if err != nil || !rep.OK() || len(rep.Deleted) == 0 || rep.IndexesSealed != len(segs)-1 || len(rep.Unsealed) > 0 {
		t.Fatalf("verify after retention: %v\n%s", err, rep)
	}
	n, _, _ := tally(scanned(t, dir), "l14")
	rep, err = Verify(dir, VerifyOptions{Verifier: verifier, Lease: "l14"})
	if err != nil || !rep.OK() || rep.Skipped == 0 || rep.LeaseRecords != n || n == 0 {
		t.Fatalf("verify --lease after retention: %v\n%s", err, rep)
	}
	tr, _ := OpenTrail(dir)
	res, err := tr.Query(context.Background(), Query{}, func(Record) error { return nil })
	if err != nil || len(res.Problems) > 0 {
		t.Fatalf("query after retention: %v %v", err, res.Problems)
	}
}

// A trail written before index seals (testdata/trail-before-seals, by the code of that time,
// with its key) verifies, and every segment is checked against its records, never skipped by an
// index nothing covers. A node's first start on it checks each segment's records and
// checkpoints and seals their indexes; an old index that does not match its records is
// reported and left unsealed.
func TestTrailWrittenBeforeSeals(t *testing.T) {
	key := func(t *testing.T, dir string) (note.Signer, note.Verifier) {
		t.Helper()
		s, err := note.NewSigner(strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dir, "audit-key"))))))
		if err != nil {
			t.Fatal(err)
		}
		v, err := NewVerifier(string(must(os.ReadFile(filepath.Join(dir, "audit-key.pub")))))
		if err != nil {
			t.Fatal(err)
		}
		return s, v
	}
	t.Run("verified record by record, never skipped", func(t *testing.T) {
		dir := copyDir(t, "testdata/trail-before-seals")
		_, v := key(t, dir)
		segs, _ := listSegments(dir)
		rep, err := Verify(dir, VerifyOptions{Verifier: v})
		if err != nil || !rep.OK() || rep.IndexesSealed != 0 || len(rep.Unsealed) != len(segs)-1 || !strings.Contains(rep.String(), "not sealed") {
			t.Fatalf("verify: %v\n%s", err, rep)
		}
		rep, err = Verify(dir, VerifyOptions{Verifier: v, Lease: "l1"})
		if err != nil || !rep.OK() || rep.Skipped != 0 || rep.Segments != len(segs) || rep.LeaseRecords != 20 {
			t.Fatalf("verify --lease: %v\n%s", err, rep)
		}
		rep, err = Verify(dir, VerifyOptions{Verifier: v, Lease: "l9"})
		if err != nil || !rep.OK() || rep.Skipped != 0 || rep.Segments != len(segs) {
			t.Fatalf("verify --lease of a lease it does not hold: %v\n%s", err, rep)
		}
		offlineQueryIsWhole(t, dir, "query")
	})
	t.Run("sealed at the node's first start", func(t *testing.T) {
		dir := copyDir(t, "testdata/trail-before-seals")
		signer, v := key(t, dir)
		segs, _ := listSegments(dir)
		s, err := OpenFile(FileConfig{Dir: dir, Node: "old", Signer: signer, Verifier: v})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		rep, err := Verify(dir, VerifyOptions{Verifier: v})
		if err != nil || !rep.OK() || rep.IndexesSealed != len(segs) || len(rep.Unsealed) > 0 {
			t.Fatalf("verify after the first start: %v\n%s", err, rep)
		}
		rep, err = Verify(dir, VerifyOptions{Verifier: v, Lease: "l9"})
		if err != nil || !rep.OK() || rep.Skipped != len(segs) || rep.Segments != 1 {
			t.Fatalf("verify --lease after the first start: %v\n%s", err, rep)
		}
	})
	t.Run("an old index edited is reported, not sealed", func(t *testing.T) {
		dir := copyDir(t, "testdata/trail-before-seals")
		signer, v := key(t, dir)
		victim := segmentOf(t, dir, must(listSegments(dir)), "l1")
		editIndex(t, filepath.Join(dir, victim), func(x *index) { delete(x.Postings[fieldLease], "l1"); delete(x.leases, "l1") })
		for _, opt := range []VerifyOptions{{Verifier: v}, {Verifier: v, Lease: "l1"}} {
			if rep, err := Verify(dir, opt); err != nil || rep.OK() || !saysTampered(rep.Problems, victim) {
				t.Fatalf("verify (lease %q): %v\n%s", opt.Lease, err, rep)
			}
		}
		s, err := OpenFile(FileConfig{Dir: dir, Node: "old", Signer: signer, Verifier: v})
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		res, err := s.Query(context.Background(), Query{Lease: "l1"}, func(r Record) error { got = append(got, r.Seq); return nil })
		s.Close()
		if w := want(scanned(t, dir), Query{Lease: "l1"}); err != nil || !slices.Equal(got, w) || !saysProblem(res.Problems, victim, "no seal covers it") {
			t.Fatalf("the node's query: %v, want %v (%v); problems %v", got, w, err, res.Problems)
		}
		if rep, _ := Verify(dir, VerifyOptions{Verifier: v}); !saysTampered(rep.Problems, victim) || slices.Contains(rep.Unsealed, victim) {
			t.Fatalf("after the start, the edited index was sealed or forgotten:\n%s", rep)
		}
	})
}

// The segment a node was writing when it stopped has no seal yet: the node seals its index at its
// next start, but only when its records check. Records rewritten while the node was down, their
// chain rebuilt (the last checkpoint then signs another head), are reported, and the index of
// what they now say is not sealed, so `verify --lease` still checks that segment and says so.
func TestRewrittenWhileStoppedIsNotSealed(t *testing.T) {
	dir, _, signer, verifier := sealTrail(t)
	s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.Write(context.Background(), Record{Kind: KindHTTP, Tenant: "acme", Lease: "l8", Decision: Deny, Host: "a.example"})
	}
	s.Close()
	segs, _ := listSegments(dir)
	victim := segs[len(segs)-1]
	rechain(t, dir, segs, func(r *Record) {
		if r.Lease == "l8" {
			r.Lease = "l7"
		}
	})
	os.Remove(indexPath(filepath.Join(dir, victim))) // the node writes none for the segment it writes
	s, err = OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Query(context.Background(), Query{Lease: "l7"}, func(Record) error { return nil })
	s.Close()
	if err != nil || !saysProblem(res.Problems, victim, "checkpoint signs seq") {
		t.Fatalf("the node's answer does not say %s was rewritten: %v %v", victim, err, res.Problems)
	}
	if _, err := os.Stat(indexPath(filepath.Join(dir, victim))); err == nil {
		t.Fatal("the node wrote the index of records that do not check")
	}
	rep, err := Verify(dir, VerifyOptions{Verifier: verifier, Lease: "l8"})
	if err != nil || rep.OK() || !saysProblem(rep.Problems, victim, "checkpoint signs seq") {
		t.Fatalf("verify --lease l8 after the start: %v\n%s", err, rep)
	}
}

// fuzzBase is the trail FuzzSealedIndex edits copies of: written once per process.
var fuzzBase struct {
	once     sync.Once
	dir      string
	sealed   []string // its segments with a sealed index
	records  []Record
	verifier note.Verifier
}

func sealedBase(t *testing.T) {
	fuzzBase.once.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-audit-fuzz-")
		if err != nil {
			t.Fatal(err)
		}
		signer, verifier := testKey(t, "a")
		s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier, SegmentBytes: 3 << 10})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			s.Write(context.Background(), Record{Kind: KindHTTP, Tenant: "acme", Lease: fmt.Sprint("l", i/10), Decision: Deny,
				Rule: "scope-miss", Host: fmt.Sprint("h", i%4, ".example"), Flagged: i%6 == 0})
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		segs, _ := listSegments(dir)
		fuzzBase.dir, fuzzBase.sealed, fuzzBase.records, fuzzBase.verifier = dir, segs[:len(segs)-1], scanned(t, dir), verifier
	})
	if len(fuzzBase.sealed) < 3 {
		t.Fatalf("the fuzz trail has %d sealed segments", len(fuzzBase.sealed))
	}
}

// FuzzSealedIndex: a sealed index edited at any bytes (flipped, overwritten, cut short, grown)
// is either byte for byte the one sealed, and every reader finds nothing wrong, or every reader
// says it was tampered with: audit verify, in full and for a lease, a reader of the directory,
// and a node starting on it. Whatever the file holds, a query answers exactly the records a scan
// of the segments selects.
func FuzzSealedIndex(f *testing.F) {
	f.Add(uint8(0), uint16(0), []byte{1}, uint16(0))
	f.Add(uint8(1), uint16(40), []byte("l1"), uint16(0))
	f.Add(uint8(2), uint16(7), []byte{}, uint16(100))
	f.Add(uint8(1), uint16(0), []byte{0}, uint16(0))
	f.Fuzz(func(t *testing.T, seg uint8, off uint16, patch []byte, cut uint16) {
		sealedBase(t)
		dir := copyDir(t, fuzzBase.dir)
		victim := fuzzBase.sealed[int(seg)%len(fuzzBase.sealed)]
		p := indexPath(filepath.Join(dir, victim))
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data := slices.Clone(orig)
		for i, b := range patch {
			if o := int(off)%len(orig) + i; o < len(data) {
				data[o] ^= b
			} else {
				data = append(data, b)
			}
		}
		if cut > 0 {
			data = data[:int(cut)%(len(data)+1)]
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		tampered := !bytes.Equal(data, orig)

		for _, opt := range []VerifyOptions{{Verifier: fuzzBase.verifier}, {Verifier: fuzzBase.verifier, Lease: "l1"}} {
			rep, err := Verify(dir, opt)
			if err != nil {
				t.Fatal(err)
			}
			if says := saysTampered(rep.Problems, victim); says != tampered || rep.OK() == tampered {
				t.Fatalf("verify (lease %q) of an index changed %v: says tampered %v\n%s", opt.Lease, tampered, says, rep)
			}
		}
		tr, err := OpenTrail(dir)
		if err != nil {
			t.Fatal(err)
		}
		node, err := OpenFile(FileConfig{Dir: dir, Node: "a", Verifier: fuzzBase.verifier})
		if err != nil {
			t.Fatal(err)
		}
		defer node.Close()
		for _, q := range []Query{{Lease: "l0"}, {Lease: "l1"}, {Lease: "l2"}, {Host: "h1.example"}, {Flagged: true}, {}} {
			w := want(fuzzBase.records, q)
			for name, r := range map[string]interface {
				Query(context.Context, Query, func(Record) error) (Result, error)
			}{"offline": tr, "node": node} {
				var got []uint64
				res, err := r.Query(context.Background(), q, func(r Record) error {
					if r.Seq <= fuzzBase.records[len(fuzzBase.records)-1].Seq {
						got = append(got, r.Seq) // the node's own records of its start are not the base's
					}
					return nil
				})
				if err != nil || !slices.Equal(got, w) {
					t.Fatalf("%s query %+v over an index changed %v: %v, want %v (%v)", name, q, tampered, got, w, err)
				}
				if says := saysTampered(res.Problems, victim); says != tampered || len(res.Problems) > 0 && !tampered {
					t.Fatalf("%s query %+v over an index changed %v: problems %v", name, q, tampered, res.Problems)
				}
			}
		}
	})
}

// A record edited in a sealed segment whose index is the one sealed is reported as what it is (a
// line that fails its own check, or, with its own hash made right, the chain broken after it),
// not as a tampered index.
func TestRecordEditUnderASealedIndex(t *testing.T) {
	for _, rechained := range []bool{false, true} {
		t.Run(fmt.Sprint("rechained ", rechained), func(t *testing.T) {
			dir, segs, _, verifier := sealTrail(t)
			victim := segmentOf(t, dir, segs, "l1")
			p := filepath.Join(dir, victim)
			ls := lines(t, p)
			for i, l := range ls {
				if r, _, err := checkLine([]byte(strings.TrimSuffix(l, "\n")), nil); err == nil && r.Lease == "l1" {
					r.Lease = "l7"
					if rechained {
						ls[i] = string((&FileSink{seq: r.Seq - 1, prev: r.Prev}).line(&r))
					} else {
						ls[i] = strings.Replace(l, `"lease":"l1"`, `"lease":"l7"`, 1)
					}
					break
				}
			}
			put(t, p, ls)
			rep, err := Verify(dir, VerifyOptions{Verifier: verifier})
			if err != nil || rep.OK() {
				t.Fatalf("verify: %v\n%s", err, rep)
			}
			if saysTampered(rep.Problems, victim) {
				t.Fatalf("a record edit under a sealed index is reported as a tampered index:\n%s", rep)
			}
			if want := "record fails its own check"; rechained {
				if !saysProblem(rep.Problems, victim, "chain broken") {
					t.Fatalf("want the chain broken after the rewritten record:\n%s", rep)
				}
			} else if !saysProblem(rep.Problems, victim, want) {
				t.Fatalf("want %q:\n%s", want, rep)
			}
		})
	}
}

// offlineQueryIsWhole asserts that the trail in dir, opened offline, answers a query for l1 with
// exactly what a scan of its records selects, and no problem.
func offlineQueryIsWhole(t *testing.T, dir, what string) {
	t.Helper()
	tr, err := OpenTrail(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	res, _ := tr.Query(context.Background(), Query{Lease: "l1"}, func(r Record) error { got = append(got, r.Seq); return nil })
	if w := want(scanned(t, dir), Query{Lease: "l1"}); !slices.Equal(got, w) || len(res.Problems) > 0 {
		t.Fatalf("%s: %v, want %v; problems %v", what, got, w, res.Problems)
	}
}
