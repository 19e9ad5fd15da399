package audit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// signedTrail writes a trail of four segments and more, each record checkpointed now and then,
// and returns its directory, its segments and the verifier key.
func signedTrail(t *testing.T, node string, signer note.Signer) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir, Node: node, Signer: signer, SegmentBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		s.Write(context.Background(), Record{Kind: KindHTTP, Lease: fmt.Sprint("l", i%3), Decision: Allow, Host: "a.example", Path: fmt.Sprint("/", i)})
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
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	return dir, segs
}

// readIndex decodes the whole index file of the segment at path.
func readIndex(t *testing.T, path string) *index {
	t.Helper()
	data, err := os.ReadFile(indexPath(path))
	if err != nil {
		t.Fatal(err)
	}
	x, err := decodeIndex(data, [nFields]string{}, true)
	if err != nil {
		t.Fatalf("the index of %s: %v", filepath.Base(path), err)
	}
	return x
}

func lines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ls := strings.SplitAfter(string(b), "\n")
	return ls[:len(ls)-1]
}

func put(t *testing.T, path string, ls []string) {
	if err := os.WriteFile(path, []byte(strings.Join(ls, "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Each way of tampering with a trail is reported for what it is, and only that.
func TestVerifyNamesEachTampering(t *testing.T) {
	signer, verifier := testKey(t, "a")
	otherSigner, _ := testKey(t, "b")
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string, segs []string) []byte // returns the latest checkpoint to check against, if any
		want   string
	}{
		{"untouched", func(*testing.T, string, []string) []byte { return nil }, ""},
		{"edit a byte", func(t *testing.T, dir string, segs []string) []byte {
			p := filepath.Join(dir, segs[1])
			ls := lines(t, p)
			ls[2] = strings.Replace(ls[2], `"a.example"`, `"b.example"`, 1)
			put(t, p, ls)
			return nil
		}, "line 3 (seq"},
		{"delete a line", func(t *testing.T, dir string, segs []string) []byte {
			p := filepath.Join(dir, segs[1])
			ls := lines(t, p)
			put(t, p, append(ls[:3:3], ls[4:]...))
			return nil
		}, "records missing: seq"},
		{"drop a segment", func(t *testing.T, dir string, segs []string) []byte {
			os.Remove(filepath.Join(dir, segs[2]))
			os.Remove(indexPath(filepath.Join(dir, segs[2])))
			return nil
		}, "segment missing: seq"},
		{"truncate the tail mid-record", func(t *testing.T, dir string, segs []string) []byte {
			p := filepath.Join(dir, segs[len(segs)-1])
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-30], 0o600)
			return nil
		}, "ends mid-record"},
		{"truncate the tail at a line", func(t *testing.T, dir string, segs []string) []byte {
			p := filepath.Join(dir, segs[len(segs)-1])
			ls := lines(t, p)
			last := readAllLoose(dir)
			latest := []byte(last[len(last)-1].Note) // the Close checkpoint, as Redis holds it
			put(t, p, ls[:len(ls)-3])
			return latest
		}, "truncated tail: the trail ends at seq"},
		{"replay another node's segment", func(t *testing.T, dir string, segs []string) []byte {
			odir, osegs := signedTrail(t, "b", otherSigner)
			b, _ := os.ReadFile(filepath.Join(odir, osegs[1]))
			p := filepath.Join(dir, segs[1])
			// Given this trail's segment name, as a forger would.
			put(t, p, []string{strings.ReplaceAll(string(b), osegs[1], segs[1])})
			os.Remove(indexPath(p))
			return nil
		}, `is from node "b", not "a"`},
		{"edit a record and rebuild the chain after it", func(t *testing.T, dir string, segs []string) []byte {
			rechain(t, dir, segs, func(r *Record) {
				if r.Path == "/30" {
					r.Decision = Deny
				}
			})
			return nil
		}, "tampered index: the segment's records are not the ones whose index was sealed|checkpoint signs seq"},
		{"delete a segment and append a retention record to explain it", func(t *testing.T, dir string, segs []string) []byte {
			// Chain-consistent (the unkeyed rule is public), but after the last checkpoint, so
			// no signature covers it.
			first := filepath.Join(dir, segs[0])
			gone, _ := readRecordAt(first, readIndex(t, first).lastSpan())
			all := readAllLoose(dir)
			w := &FileSink{seq: all[len(all)-1].Seq, prev: all[len(all)-1].Hash}
			forged := Record{Kind: KindAudit, Event: EventRetention, Node: "a", Through: gone.Seq, Head: gone.Hash, Reason: "deleted 1 segment(s)"}
			last := filepath.Join(dir, segs[len(segs)-1])
			f, _ := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
			f.Write(w.line(&forged))
			f.Close()
			os.Remove(first)
			os.Remove(indexPath(first))
			return nil
		}, "the trail starts at seq"},
		{"edit an index", func(t *testing.T, dir string, segs []string) []byte {
			p := indexPath(filepath.Join(dir, segs[1]))
			x := readIndex(t, filepath.Join(dir, segs[1]))
			delete(x.Postings[fieldLease], "l1")
			os.WriteFile(p, x.encode(), 0o600)
			return nil
		}, "tampered index: " + segmentName(9)[:20] + ".idx does not match the segment's records"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, segs := signedTrail(t, "a", signer)
			latest := c.tamper(t, dir, segs)
			rep, err := Verify(dir, VerifyOptions{Verifier: verifier, Latest: latest})
			if err != nil {
				t.Fatal(err)
			}
			out := rep.String()
			t.Logf("\n%s", out)
			if c.want == "" {
				if !rep.OK() || rep.CheckpointsValid != rep.Checkpoints || rep.RecordsValid != rep.Records || rep.Covered != rep.To {
					t.Fatalf("an untouched trail:\n%s", out)
				}
				return
			}
			// The first problem says what was done; "|" separates what later ones must say too.
			wants := strings.Split(c.want, "|")
			if rep.OK() || !strings.Contains(rep.Problems[0].String(), wants[0]) {
				t.Fatalf("want the first problem to say %q:\n%s", wants[0], out)
			}
			for _, w := range wants[1:] {
				if !strings.Contains(out, w) {
					t.Fatalf("want a problem to say %q:\n%s", w, out)
				}
			}
		})
	}
}

// rechain rewrites every record of the trail through edit, recomputes every hash after it and
// writes each segment's index again from its new records, as an attacker who knows the
// (unkeyed) chain's and index's rules would. Only what the key signs (checkpoints, index seals)
// still tells.
func rechain(t *testing.T, dir string, segs []string, edit func(*Record)) {
	w := &FileSink{}
	for _, name := range segs {
		p := filepath.Join(dir, name)
		var out bytes.Buffer
		f, _ := os.Open(p)
		scanLines(f, func(_ []byte, _ int64, r *Record, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			edit(r)
			w.seq = r.Seq - 1
			out.Write(w.line(r))
			return nil
		})
		f.Close()
		os.WriteFile(p, out.Bytes(), 0o600)
		x, _, err := buildIndex(p)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(indexPath(p), x.encode(), 0o600)
	}
}

// --since and --lease check only the segments they need, without reporting the ones before as
// missing.
func TestVerifySinceAndLease(t *testing.T) {
	signer, verifier := testKey(t, "a")
	dir, segs := signedTrail(t, "a", signer)
	rep, err := Verify(dir, VerifyOptions{Verifier: verifier, Lease: "l2"})
	if err != nil || !rep.OK() || rep.LeaseRecords != 20 {
		t.Fatalf("verify --lease l2 (20 records):\n%s", rep)
	}
	from, _ := readIndex(t, filepath.Join(dir, segs[2])).timeSpan()
	rep, err = Verify(dir, VerifyOptions{Verifier: verifier, Since: from})
	if err != nil || !rep.OK() || rep.Segments > len(segs)-1 {
		t.Fatalf("verify --since:\n%s", rep)
	}
}
