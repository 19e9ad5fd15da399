package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/rule"
)

// hostile is a record a sandbox or tenant could cause: every text field holds bytes that are not
// UTF-8, control characters, terminal escapes and JSON's own syntax.
func hostile() Record {
	code := 1
	bad := "\xff\xfe/..\x00\x1b[2J\x1b]0;owned\x07\"}\n{\"seq\":1}\u2028\xc3"
	return Record{
		Time: time.Date(2026, 12, 1, 10, 0, 0, 5, time.UTC), Kind: Kind("http" + bad), Node: "n" + bad,
		Tenant: "t" + bad, Lease: "l" + bad, Task: "task" + bad, Sandbox: "s" + bad, Source: "10.0.0.2" + bad,
		Decision: Decision("deny" + bad), Rule: rule.Rule("r" + bad), Reason: "why" + bad, Method: "GET" + bad,
		Host: "h" + bad, Port: 443, Path: "/%ff" + bad, Credential: "c" + bad, Status: 403, Upstream: "u" + bad, Dest: "d" + bad, Mirror: "m" + bad,
		QName: "q" + bad, QType: "A" + bad, Event: Event("e" + bad), Command: []string{"sh", bad, "-c", "\xff"},
		ExitCode: &code, SHA256: "x" + bad, Size: 7, Template: "tp" + bad, Runtime: "rt" + bad, Scopes: []string{"ok", bad},
		Stdin: &Stream{Size: 1, SHA256: "s" + bad, Head: "h" + bad},
	}
}

// The trail survives any bytes: a record holding them verifies, reads back byte for byte, and
// does not break the records after it or the opening of the trail by the next run.
func TestTrailSurvivesAnyBytes(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	h := hostile()
	h.Stdout = &Stream{Size: 3, SHA256: "abc", Head: "\xff\x1b[2Jout"}
	want := []Record{{Kind: KindHTTP, Path: "/before"}, h, {Kind: KindHTTP, Path: "/after"}}
	for _, r := range want {
		if err := s.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The next run opens it and continues the chain.
	s, err = OpenFile(FileConfig{Dir: dir})
	if err != nil {
		t.Fatalf("reopening a trail that holds invalid UTF-8: %v", err)
	}
	want = append(want, Record{Kind: KindLease, Event: "bind"})
	if err := s.Write(context.Background(), want[3]); err != nil {
		t.Fatal(err)
	}
	s.Close()
	got := userRecords(readAll(t, dir))
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		g := got[i]
		g.Seq, g.Prev, g.Hash, g.Raw = 0, "", "", nil
		w := want[i]
		if w.Time.IsZero() {
			g.Time = time.Time{}
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("record %d did not read back byte for byte:\n got %#v\nwant %#v", i, g, w)
		}
	}
	// Each line is valid JSON on one line, whatever the record held.
	segs, _ := listSegments(dir)
	b, _ := os.ReadFile(filepath.Join(dir, segs[0]))
	if n := bytes.Count(b, []byte("\n")); n != 4 {
		t.Fatalf("first segment has %d lines, want 4 (its opening record and three)", n)
	}
	if bytes.Contains(b, []byte{0x1b}) || bytes.Contains(b, []byte{0xff}) {
		t.Fatal("raw escape or invalid bytes were written into the trail's text")
	}
	if rep, err := Verify(dir, VerifyOptions{}); err != nil || !rep.OK() {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}

// writeTrail writes n records in one segment (after its opening record) and returns the
// directory and the segment's path.
func writeTrail(t *testing.T, n int) (string, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		s.Write(context.Background(), Record{Kind: KindHTTP, Decision: Deny, Host: "a.example"})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := listSegments(dir)
	return dir, filepath.Join(dir, segs[0])
}

func seqsOf(t *testing.T, dir string) ([]uint64, error) {
	var seqs []uint64
	err := ReadDir(dir, func(r Record) error { seqs = append(seqs, r.Seq); return nil })
	return seqs, err
}

// An edited line is reported and the records around it are still read; the node still starts on
// it, and what it writes next links to the last good record.
func TestEditedLineReportedOthersRead(t *testing.T) {
	dir, path := writeTrail(t, 5)
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	lines[3] = strings.Replace(lines[3], `"decision":"deny"`, `"decision":"allow"`, 1)
	os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600)

	seqs, err := seqsOf(t, dir)
	var te *TrailError
	if !errors.As(err, &te) || len(te.Problems) != 1 || te.Problems[0].Seq != 4 || !strings.Contains(te.Problems[0].Reason, "edited") {
		t.Fatalf("an edited seq 4 was reported as %v", err)
	}
	if !reflect.DeepEqual(seqs, []uint64{1, 2, 3, 5, 6}) {
		t.Fatalf("records read around the edited one: %v, want 1 2 3 5 6", seqs)
	}
	s, err := OpenFile(FileConfig{Dir: dir})
	if err != nil {
		t.Fatalf("a trail with an edited line stopped the sink from opening: %v", err)
	}
	s.Write(context.Background(), Record{Kind: KindLease, Event: "bind"})
	s.Close()
	rep, _ := Verify(dir, VerifyOptions{})
	if len(rep.Problems) != 1 || rep.Problems[0].Line != 4 || rep.RecordsValid != rep.Records-1 {
		t.Fatalf("after a new run:\n%s", rep)
	}
}

// A write cut short by a crash leaves a torn last line: the next run starts, continues the chain
// from the last complete record, and only the torn line is reported.
func TestTornTailDoesNotStopStart(t *testing.T) {
	dir, path := writeTrail(t, 3)
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b[:len(b)-20], 0o600)
	s, err := OpenFile(FileConfig{Dir: dir})
	if err != nil {
		t.Fatalf("torn trail stopped the sink from opening: %v", err)
	}
	s.Write(context.Background(), Record{Kind: KindLease, Event: "after-crash"})
	s.Close()
	rep, _ := Verify(dir, VerifyOptions{})
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Reason, "ends mid-record") {
		t.Fatalf("torn line reported as:\n%s", rep)
	}
	// The chain goes on from seq 3: the new segment's opening record (4), the seal of the torn
	// segment's index (5), then the record written (6).
	got := readAllLoose(dir)
	if last := got[len(got)-1]; last.Event != "after-crash" || last.Seq != 6 || got[len(got)-3].Seq != 4 || got[len(got)-3].Prev != got[len(got)-4].Hash {
		t.Fatalf("the record after the torn line: %+v", last)
	}
}

// readAllLoose reads what verifies and ignores the problems.
func readAllLoose(dir string) []Record {
	var out []Record
	ReadDir(dir, func(r Record) error { out = append(out, r); return nil })
	return out
}

// Garbage in place of a whole segment still opens: the chain starts afresh, and Verify says why.
func TestGarbageTrailStillOpens(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, segmentName(1)), []byte("not json\n\x00\xff{\"hash\":1}\n"), 0o600)
	s, err := OpenFile(FileConfig{Dir: dir})
	if err != nil {
		t.Fatalf("garbage trail stopped the sink from opening: %v", err)
	}
	s.Write(context.Background(), Record{Kind: KindLease, Event: "bind"})
	s.Close()
	if got := userRecords(readAllLoose(dir)); len(got) != 1 {
		t.Fatalf("%d records read", len(got))
	}
	rep, _ := Verify(dir, VerifyOptions{})
	if len(rep.Problems) < 2 {
		t.Fatalf("garbage segment verified as:\n%s", rep)
	}
}

// A line longer than the reader's buffer is read whole, by a query as by Verify.
func TestLongLine(t *testing.T) {
	dir := t.TempDir()
	s, _ := OpenFile(FileConfig{Dir: dir})
	big := strings.Repeat("\x01\xff", 300<<10) // escapes grow it past 3 MB on the line
	s.Write(context.Background(), Record{Kind: KindExec, Command: []string{"echo", big}})
	s.Write(context.Background(), Record{Kind: KindLease, Event: "next"})
	s.Close()
	got := userRecords(readAll(t, dir))
	if len(got) != 2 || got[0].Command[1] != big {
		t.Fatalf("long line did not read back (%d records)", len(got))
	}
	if rep, _ := Verify(dir, VerifyOptions{}); !rep.OK() {
		t.Fatalf("verify:\n%s", rep)
	}
}

// FuzzTrailRoundTrip: whatever bytes the fields hold, the line verifies, links, and reads back
// exactly.
func FuzzTrailRoundTrip(f *testing.F) {
	f.Add("/%ff", "\xff", "a.example.", "\x1b[31m", int64(3))
	f.Add("", "", "", "", int64(0))
	f.Add("\u2028\"\\", "\xc3", "\xed\xa0\x80", "\x00", int64(-1))
	f.Fuzz(func(t *testing.T, path, reason, qname, arg string, n int64) {
		want := Record{Kind: KindHTTP, Path: path, Reason: reason, QName: qname, Command: []string{arg, path},
			BytesUp: n, Method: arg, Host: qname, Stdout: &Stream{Size: n, SHA256: arg, Head: reason}}
		if arg == "" {
			want.Command = nil
		}
		s := &FileSink{}
		var buf bytes.Buffer
		for range 2 {
			r := want
			buf.Write(s.line(&r))
		}
		var got []Record
		prev := ""
		if err := scanLines(&buf, func(_ []byte, _ int64, r *Record, err error) error {
			if err != nil {
				return err
			}
			if r.Prev != prev {
				return errors.New("chain broken")
			}
			prev = r.Hash
			got = append(got, *r)
			return nil
		}); err != nil {
			t.Fatalf("a record of %q did not verify: %v", []string{path, reason, qname, arg}, err)
		}
		if len(got) != 2 {
			t.Fatalf("read %d records", len(got))
		}
		g := got[1]
		g.Seq, g.Prev, g.Hash, g.Raw, g.Time = 0, "", "", nil, time.Time{}
		if !reflect.DeepEqual(g, want) {
			t.Fatalf("round trip lost bytes:\n got %#v\nwant %#v", g, want)
		}
	})
}

// What a sink ships as "json" is the trail's line byte for byte, whatever the record holds, so a
// receiver can check the chain with the same rule: Line of a record read back is the line read.
func TestLineIsTheTrailsLine(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Record{hostile(), {Kind: KindHTTP, Host: "a.example", DurationMS: 0.1 + 0.2}, {Kind: KindLease, Time: time.Now().In(time.FixedZone("x", 5*3600+1800))}} {
		s.Write(context.Background(), r)
	}
	s.Close()
	segs, _ := listSegments(dir)
	b, _ := os.ReadFile(filepath.Join(dir, segs[0]))
	lines := strings.SplitAfter(string(b), "\n")
	i := 0
	for _, r := range readAll(t, dir) {
		if got := string(Line(&r)) + "\n"; got != lines[i] {
			t.Fatalf("record %d ships as\n%q\nbut the trail holds\n%q", r.Seq, got, lines[i])
		}
		i++
	}
	if i != len(lines)-1 {
		t.Fatalf("compared %d of %d lines", i, len(lines)-1)
	}
}
