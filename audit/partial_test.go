package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// removeSegment deletes a segment and its index, as someone deleting it by hand would.
func removeSegment(t *testing.T, dir, name string) {
	t.Helper()
	for _, p := range []string{filepath.Join(dir, name), indexPath(filepath.Join(dir, name))} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// appendForged appends to the trail's last segment a record that links to the one before it,
// with its hash made right: the unkeyed rule is public, a signature is not.
func appendForged(t *testing.T, dir string, r Record) {
	t.Helper()
	segs, _ := listSegments(dir)
	last := filepath.Join(dir, segs[len(segs)-1])
	all := readAllLoose(dir)
	w := &FileSink{seq: all[len(all)-1].Seq, prev: all[len(all)-1].Hash}
	f, err := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(w.line(&r)); err != nil {
		t.Fatal(err)
	}
}

// A check of one lease, or from a time on, follows the chain across the segments it skips (their
// first record and the last one their seal names) and establishes the front of the trail as a
// full check does: a segment removed by hand is missed by no check, even one that would have
// skipped it, and even at the front, where before a partial check took the first segment left
// for the start of the trail and said "chain intact" for leases whose records were all gone.
func TestPartialVerifyFollowsTheChain(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string, segs []string)
		want   string
	}{
		{"a segment in the middle removed", func(t *testing.T, dir string, segs []string) {
			removeSegment(t, dir, segmentOf(t, dir, segs, "l3"))
		}, "segment missing: seq"},
		{"the oldest segments removed, up to the first of l2", func(t *testing.T, dir string, segs []string) {
			for _, name := range segs[:slices.Index(segs, segmentOf(t, dir, segs, "l2"))] {
				removeSegment(t, dir, name)
			}
		}, "the trail starts at seq"},
		{"the oldest segments removed, and a retention record appended to explain them", func(t *testing.T, dir string, segs []string) {
			keep := slices.Index(segs, segmentOf(t, dir, segs, "l2"))
			prev := filepath.Join(dir, segs[keep-1])
			gone, err := readRecordAt(prev, readIndex(t, prev).lastSpan())
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range segs[:keep] {
				removeSegment(t, dir, name)
			}
			// Chain-consistent, but after the last checkpoint: no signature covers it.
			appendForged(t, dir, Record{Kind: KindAudit, Event: EventRetention, Node: "a", Through: gone.Seq, Head: gone.Hash,
				Reason: fmt.Sprintf("deleted %d segment(s)", keep)})
		}, "the trail starts at seq"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, segs, _, verifier := sealTrail(t)
			c.tamper(t, dir, segs)
			for _, opt := range []VerifyOptions{
				{Verifier: verifier},
				{Verifier: verifier, Lease: "l0"}, // every record of it removed, in the front cases
				{Verifier: verifier, Lease: "l1"},
				{Verifier: verifier, Lease: "l2"}, // in the first segment left, which is checked
				{Verifier: verifier, Lease: "l5"},
			} {
				rep, err := Verify(dir, opt)
				if err != nil {
					t.Fatal(err)
				}
				if rep.OK() || !strings.Contains(rep.String(), "INVALID: ") || !strings.Contains(rep.String(), c.want) {
					t.Fatalf("verify --lease %q: want %q:\n%s", opt.Lease, c.want, rep)
				}
				if opt.Lease != "" && rep.Skipped == 0 {
					t.Fatalf("verify --lease %q skipped nothing, so it did not test a partial check:\n%s", opt.Lease, rep)
				}
			}
		})
	}
}

// A trail whose oldest segments retention deleted verifies for one lease as it does in full,
// when the signed retention record that explains the front is in a segment the check skips: it
// is found through that segment's sealed index and trusted for the checkpoint that signs it.
func TestPartialVerifyAfterRetention(t *testing.T) {
	signer, verifier := testKey(t, "a")
	dir := t.TempDir()
	write := func(keepBytes int64, from, to int) {
		t.Helper()
		s, err := OpenFile(FileConfig{Dir: dir, Node: "a", Signer: signer, Verifier: verifier, SegmentBytes: 2 << 10, KeepBytes: keepBytes})
		if err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			s.Write(context.Background(), Record{Kind: KindHTTP, Tenant: "acme", Lease: fmt.Sprint("l", i/15), Decision: Allow, Host: "a.example"})
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write(10<<10, 0, 60) // retention deletes the oldest segments
	write(0, 60, 120)    // then none: the last retention record ends up in a segment in the middle
	segs, _ := listSegments(dir)
	var holder string // the segment of the last retention record
	for _, name := range segs {
		if strings.Contains(strings.Join(lines(t, filepath.Join(dir, name)), ""), `"event":"retention"`) {
			holder = name
		}
	}
	if holder == "" || holder == segs[len(segs)-1] || strings.Contains(strings.Join(lines(t, filepath.Join(dir, holder)), ""), `"lease":"l7"`) {
		t.Fatalf("the last retention record is in %q, which a check of l7 does not skip", holder)
	}
	full, err := Verify(dir, VerifyOptions{Verifier: verifier})
	if err != nil || !full.OK() || len(full.Deleted) == 0 {
		t.Fatalf("verify: %v\n%s", err, full)
	}
	rep, err := Verify(dir, VerifyOptions{Verifier: verifier, Lease: "l7"})
	if err != nil || !rep.OK() || rep.Skipped == 0 || !slices.Equal(rep.Deleted, full.Deleted) {
		t.Fatalf("verify --lease l7: %v\n%s", err, rep)
	}
}

// A check of one lease compares the latest checkpoint given (from Redis, or --latest) with the
// trail as a full check does: a checkpoint edited is refused, and the segment holding the record
// it signs is read even when the lease is not in it, so a rewrite of that record (its own hash
// made right, nothing its index or its seal covers changed) is found.
func TestPartialVerifyComparesTheLatestCheckpoint(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, path string, latest []byte, seq uint64) []byte
		want   string
	}{
		{"the checkpoint edited", func(t *testing.T, _ string, latest []byte, _ uint64) []byte {
			return []byte(strings.Replace(string(latest), "\n\n", "\nextra\n\n", 1))
		}, "the latest checkpoint given"},
		{"the record it signs rewritten, in a segment the check would skip", func(t *testing.T, path string, latest []byte, seq uint64) []byte {
			ls := lines(t, path)
			for i, l := range ls {
				if r, _, err := checkLine([]byte(strings.TrimSuffix(l, "\n")), nil); err == nil && r.Seq == seq {
					r.BytesUp++ // not indexed, and the same length
					ls[i] = string((&FileSink{seq: r.Seq - 1, prev: r.Prev}).line(&r))
				}
			}
			put(t, path, ls)
			return latest
		}, "is not the one it signed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, segs, _, verifier := sealTrail(t)
			// A checkpoint in a segment that holds none of l5, as the latest one Redis kept.
			var latest []byte
			var seq uint64
			var path string
			for _, name := range segs[:len(segs)-1] {
				p := filepath.Join(dir, name)
				all := strings.Join(lines(t, p), "")
				if latest != nil || strings.Contains(all, `"lease":"l5"`) {
					continue
				}
				ls := lines(t, p)
				for i := 1; i < len(ls); i++ {
					before, _, _ := checkLine([]byte(strings.TrimSuffix(ls[i-1], "\n")), nil)
					if r, _, err := checkLine([]byte(strings.TrimSuffix(ls[i], "\n")), nil); err == nil && r.Event == EventCheckpoint && before.Kind != KindAudit {
						latest, seq, path = []byte(r.Note), before.Seq, p
					}
				}
			}
			if latest == nil {
				t.Fatal("no checkpoint signing a record of traffic in a segment without l5")
			}
			if rep, err := Verify(dir, VerifyOptions{Verifier: verifier, Lease: "l5", Latest: latest}); err != nil || !rep.OK() || rep.Skipped == 0 {
				t.Fatalf("verify --lease l5 of the untouched trail: %v\n%s", err, rep)
			}
			latest = c.tamper(t, path, latest, seq)
			rep, err := Verify(dir, VerifyOptions{Verifier: verifier, Lease: "l5", Latest: latest})
			if err != nil || rep.OK() || !strings.Contains(rep.String(), c.want) {
				t.Fatalf("verify --lease l5: want %q: %v\n%s", c.want, err, rep)
			}
		})
	}
}

// A check of one lease, or from a time on, of a trail with no segment yet says there is nothing
// to check (it sliced the segment list to all but the last, and panicked).
func TestPartialVerifyOfAnEmptyTrail(t *testing.T) {
	_, verifier := testKey(t, "a")
	rep, err := Verify(t.TempDir(), VerifyOptions{Verifier: verifier, Lease: "l0"})
	if err != nil || !rep.OK() || rep.Records != 0 || !strings.Contains(rep.String(), "No records to check") {
		t.Fatalf("verify --lease of an empty trail: %v\n%s", err, rep)
	}
}
