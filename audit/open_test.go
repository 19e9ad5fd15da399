package audit

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// relink rewrites the first n lines of the segment at path (every line when n < 0) through edit
// and links each to the one before it again, hashes made right, as anyone who knows the chain's
// (unkeyed) rule can: the first line links to prev, or keeps its own prev when prev is "". It
// returns the hash of the last line rewritten.
func relink(t *testing.T, path, prev string, n int, edit func(line int, r *Record)) string {
	t.Helper()
	ls := lines(t, path)
	if n < 0 || n > len(ls) {
		n = len(ls)
	}
	for i := range n {
		r, _, err := checkLine([]byte(strings.TrimSuffix(ls[i], "\n")), nil)
		if err != nil {
			t.Fatalf("%s line %d: %v", filepath.Base(path), i+1, err)
		}
		if i > 0 || prev != "" {
			r.Prev = prev
		}
		if edit != nil {
			edit(i+1, &r)
		}
		w := &FileSink{seq: r.Seq - 1, prev: r.Prev}
		ls[i], prev = string(w.line(&r)), w.prev
	}
	put(t, path, ls)
	return prev
}

// lastOfLease is the last sealed segment holding a record of lease and no checkpoint: rewriting
// it with its chain leaves nothing inside it that a signature covers.
func lastOfLease(t *testing.T, dir string, segs []string, lease string) string {
	t.Helper()
	victim := ""
	for _, name := range segs[:len(segs)-2] {
		all := strings.Join(lines(t, filepath.Join(dir, name)), "")
		if strings.Contains(all, `"lease":"`+lease+`"`) && !strings.Contains(all, `"event":"checkpoint"`) {
			victim = name
		}
	}
	if victim == "" {
		t.Fatalf("no sealed segment holds %s without a checkpoint", lease)
	}
	return victim
}

// headSeal returns the line (0-based) of the segment at path holding the seal of segment name.
func headSeal(t *testing.T, path, name string) int {
	t.Helper()
	for i, l := range lines(t, path) {
		if strings.Contains(l, `"event":"index"`) && strings.Contains(l, `"segment":"`+name+`"`) {
			return i
		}
	}
	t.Fatalf("%s holds no seal of %s", filepath.Base(path), name)
	return 0
}

// moveOne rewrites the segment at path with its first record of lease l1 moved to lease l7 (the
// same length, so offsets hold) and its chain rebuilt from there, and deletes its index: the
// attack on a segment that no signature inside it covers.
func moveOne(t *testing.T, path string) string {
	t.Helper()
	moved := false
	head := relink(t, path, "", -1, func(_ int, r *Record) {
		if r.Lease == "l1" && !moved {
			r.Lease, moved = "l7", true
		}
	})
	os.Remove(indexPath(path))
	return head
}

// countSeals counts the records of the trail in dir, verifying on their own, that seal segment.
func countSeals(t *testing.T, dir, segment string) int {
	t.Helper()
	n := 0
	for _, r := range scanned(t, dir) {
		if r.Kind == KindAudit && r.Event == EventIndex && r.Segment == segment {
			n++
		}
	}
	return n
}

// At start the node seals the index of a segment it reads only when the chain after it holds up
// to a signature: its last record linked to the next segment's first, and that segment read on to
// a checkpoint or to the last record its seal signs. A segment rewritten with its chain while the
// node was down, whose seal was destroyed, was sealed again before: its seal was checked, its
// neighbour trusted for its own seal without its first record being linked to it, and the review
// page and GET /v1/audit showed the rewritten records with no problem. Each way of hiding the
// rewrite is tried here; the node seals nothing over it, at this start or the next, and every
// answer names the segment; audit verify, in full and for a lease it skips segments for, fails.
func TestStartSealsOnlyWhatTheChainCovers(t *testing.T) {
	cases := []struct {
		name string
		// tamper rewrites the trail; victim is the segment the node must not seal.
		tamper func(t *testing.T, dir string, segs []string) (victim string)
		says   string // what the answers say of the victim
	}{
		{"rewritten, a byte of its seal flipped", func(t *testing.T, dir string, segs []string) string {
			victim := lastOfLease(t, dir, segs, "l1")
			moveOne(t, filepath.Join(dir, victim))
			next := filepath.Join(dir, segs[slices.Index(segs, victim)+1])
			ls := lines(t, next)
			i := headSeal(t, next, victim)
			ls[i] = strings.Replace(ls[i], `"time":"2`, `"time":"3`, 1)
			put(t, next, ls)
			return victim
		}, "not sealed: the chain breaks"},
		{"rewritten, the next segment's head linked to it, its seal replaced by a replayed one of the same length", func(t *testing.T, dir string, segs []string) string {
			victim := lastOfLease(t, dir, segs, "l1")
			at := slices.Index(segs, victim)
			head := moveOne(t, filepath.Join(dir, victim))
			// The seal of the segment before the victim (at the victim's own head), replayed in
			// place of the victim's: a seal of a segment already sealed counts for nothing, and
			// nothing else in the next segment changes length, so its sealed index still holds.
			replay, _, err := checkLine([]byte(strings.TrimSuffix(lines(t, filepath.Join(dir, victim))[headSeal(t, filepath.Join(dir, victim), segs[at-1])], "\n")), nil)
			if err != nil {
				t.Fatal(err)
			}
			next := filepath.Join(dir, segs[at+1])
			i := headSeal(t, next, victim)
			relink(t, next, head, i+2, func(line int, r *Record) {
				if line == i+1 {
					seq, prev := r.Seq, r.Prev
					*r = replay
					r.Seq, r.Prev = seq, prev
				}
			})
			seals, _, err := readSeals(dir, segs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sealedIndex(next, seals[segs[at+1]], false); err != nil {
				t.Fatalf("the attack changed the next segment's sealed index: %v", err)
			}
			return victim
		}, "not sealed: the chain breaks"},
		{"rewritten, its seal removed, and every segment after it linked to it", func(t *testing.T, dir string, segs []string) string {
			victim := lastOfLease(t, dir, segs, "l1")
			head := moveOne(t, filepath.Join(dir, victim))
			for _, name := range segs[slices.Index(segs, victim)+1:] {
				p := filepath.Join(dir, name)
				if name == segs[slices.Index(segs, victim)+1] {
					ls := lines(t, p)
					put(t, p, slices.Delete(ls, headSeal(t, p, victim), headSeal(t, p, victim)+1))
				}
				head = relink(t, p, head, -1, nil)
			}
			return victim
		}, "not sealed: the chain breaks"},
		{"replaced by an older copy of itself, with its sealed index", func(t *testing.T, dir string, segs []string) string {
			victim := segmentOf(t, dir, segs, "l1")
			p := filepath.Join(dir, victim)
			put(t, p, lines(t, p)[:3])
			return victim
		}, "tampered index"},
		{"two segments swapped, with their indexes", func(t *testing.T, dir string, segs []string) string {
			a, b := filepath.Join(dir, segs[2]), filepath.Join(dir, segs[3])
			for _, p := range [][2]string{{a, b}, {indexPath(a), indexPath(b)}} {
				x, y := must(os.ReadFile(p[0])), must(os.ReadFile(p[1]))
				os.WriteFile(p[0], y, 0o600)
				os.WriteFile(p[1], x, 0o600)
			}
			return segs[2]
		}, "tampered index"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, segs, signer, verifier := sealTrail(t)
			victim := c.tamper(t, dir, segs)
			sealsBefore := countSeals(t, dir, victim)
			// A check of a lease none of the segments around the victim hold reads them still.
			for _, opt := range []VerifyOptions{{Verifier: verifier}, {Verifier: verifier, Lease: "l5"}} {
				if rep, err := Verify(dir, opt); err != nil || rep.OK() || opt.Lease != "" && rep.Skipped == 0 {
					t.Fatalf("verify --lease %q: %v\n%s", opt.Lease, err, rep)
				}
			}
			for start := range 2 {
				s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier})
				if err != nil {
					t.Fatal(err)
				}
				for _, q := range []Query{{Lease: "l1"}, {Lease: "l7"}, {Lease: "l5"}} {
					w := want(scanned(t, dir), q)
					var got []uint64
					res, err := s.Query(context.Background(), q, func(r Record) error { got = append(got, r.Seq); return nil })
					if err != nil || !slices.Equal(got, w) {
						t.Fatalf("start %d: query %+v: %v, want %v (%v)", start+1, q, got, w, err)
					}
					if !saysProblem(res.Problems, victim, c.says) {
						t.Fatalf("start %d: query %+v does not say %q of %s: %v", start+1, q, c.says, victim, res.Problems)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if n := countSeals(t, dir, victim); n != sealsBefore {
					t.Fatalf("start %d: the node sealed %s (%d seals of it, %d before)", start+1, victim, n, sealsBefore)
				}
			}
			if rep, err := Verify(dir, VerifyOptions{Verifier: verifier, Lease: "l5"}); err != nil || rep.OK() {
				t.Fatalf("verify --lease l5 after the starts: %v\n%s", err, rep)
			}
		})
	}
}

// A segment the node trusts by its seal, without reading it, is still linked to the one before,
// and its head (read for the seals it holds) is checked: what was done there is in every answer,
// and in audit verify's report when it skips the segment.
func TestATrustedSegmentsHeadIsChecked(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, path string)
		says   string
	}{
		{"a byte flipped in the record after its seals", func(t *testing.T, path string) {
			ls := lines(t, path)
			i := slices.IndexFunc(ls, func(l string) bool { return !strings.Contains(l, `"kind":"audit"`) })
			ls[i] = strings.Replace(ls[i], `"time":"2`, `"time":"3`, 1)
			put(t, path, ls)
		}, "record fails its own check"},
		{"its opening record's prev changed, its head linked to it again", func(t *testing.T, path string) {
			relink(t, path, strings.Repeat("0", hashLen), 3, nil)
		}, "chain broken"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, segs, signer, verifier := sealTrail(t)
			victim := segs[3]
			if strings.Contains(strings.Join(lines(t, filepath.Join(dir, victim)), ""), `"lease":"l5"`) {
				t.Fatal("the victim holds l5, so verify --lease l5 does not skip it")
			}
			c.tamper(t, filepath.Join(dir, victim))
			rep, err := Verify(dir, VerifyOptions{Verifier: verifier, Lease: "l5"})
			if err != nil || !saysProblem(rep.Problems, victim, c.says) || rep.Skipped == 0 {
				t.Fatalf("verify --lease l5 does not say %q of %s: %v\n%s", c.says, victim, err, rep)
			}
			s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier})
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Query(context.Background(), Query{Lease: "l5"}, func(Record) error { return nil })
			s.Close()
			if err != nil || !saysProblem(res.Problems, victim, c.says) {
				t.Fatalf("the node's answer does not say %q of %s: %v %v", c.says, victim, err, res.Problems)
			}
			if saysProblem(res.Problems, segs[2], "") {
				t.Fatalf("the node found fault with %s, before the victim: %v", segs[2], res.Problems)
			}
		})
	}
}
