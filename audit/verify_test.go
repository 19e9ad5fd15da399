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
		QName: "q" + bad, QType: "A" + bad, Event: "e" + bad, Command: []string{"sh", bad, "-c", "\xff"},
		ExitCode: &code, SHA256: "x" + bad, Size: 7,
	}
}

// The trail survives any bytes: a record holding them verifies, reads back byte for byte, and
// does not break the records after it or the opening of the trail by the next run.
func TestTrailSurvivesAnyBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{{Kind: KindHTTP, Path: "/before"}, hostile(), {Kind: KindHTTP, Path: "/after"}}
	for _, r := range want {
		if err := s.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The next run opens it and continues the chain.
	s, err = OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatalf("reopening a trail that holds invalid UTF-8: %v", err)
	}
	want = append(want, Record{Kind: KindLease, Event: "bind"})
	if err := s.Write(context.Background(), want[3]); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var got []Record
	if err := Read(path, func(r Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatalf("reading it back: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		g := got[i]
		if g.Seq != uint64(i+1) {
			t.Errorf("record %d has seq %d", i, g.Seq)
		}
		g.Seq, g.Prev, g.Hash, g.Raw = 0, "", "", nil
		w := want[i]
		if w.Time.IsZero() {
			g.Time = time.Time{}
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("record %d did not read back byte for byte:\n got %#v\nwant %#v", i, g, w)
		}
	}
	// The line itself is valid JSON on one line, whatever the record held.
	b, _ := os.ReadFile(path)
	if n := bytes.Count(b, []byte("\n")); n != 4 {
		t.Fatalf("trail has %d lines, want 4", n)
	}
	if bytes.Contains(b, []byte{0x1b}) || bytes.Contains(b, []byte{0xff}) {
		t.Fatal("raw escape or invalid bytes were written into the trail's text")
	}
}

// An edited line is reported by its position and the records around it are still read.
func TestEditedLineReportedOthersRead(t *testing.T) {
	path := writeTrail(t, 5)
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	lines[2] = strings.Replace(lines[2], `"decision":"deny"`, `"decision":"allow"`, 1)
	os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600)

	var seqs []uint64
	err := Read(path, func(r Record) error { seqs = append(seqs, r.Seq); return nil })
	var te *TrailError
	if !errors.As(err, &te) || len(te.Problems) != 1 || te.Problems[0].Line != 3 || !strings.Contains(te.Problems[0].Reason, "edited") {
		t.Fatalf("an edited line 3 was reported as %v", err)
	}
	if !reflect.DeepEqual(seqs, []uint64{1, 2, 4, 5}) {
		t.Fatalf("records read around the edited one: %v, want 1 2 4 5", seqs)
	}
	// The node still starts on it, and what it writes next links to the last good record.
	s, err := OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatalf("a trail with an edited line stopped the sink from opening: %v", err)
	}
	s.Write(context.Background(), Record{Kind: KindLease, Event: "bind"})
	s.Close()
	seqs = nil
	err = Read(path, func(r Record) error { seqs = append(seqs, r.Seq); return nil })
	if !errors.As(err, &te) || len(te.Problems) != 1 || !reflect.DeepEqual(seqs, []uint64{1, 2, 4, 5, 6}) {
		t.Fatalf("after a new write: %v, records %v", err, seqs)
	}
}

// A deleted line breaks the chain where it was; the records are still read.
func TestDeletedLineReported(t *testing.T) {
	path := writeTrail(t, 4)
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	os.WriteFile(path, []byte(lines[0]+lines[2]+lines[3]), 0o600)
	n := 0
	err := Read(path, func(Record) error { n++; return nil })
	var te *TrailError
	if !errors.As(err, &te) || te.Problems[0].Line != 2 || !strings.Contains(te.Problems[0].Reason, "chain broken") || n != 3 {
		t.Fatalf("deleted line: %v, %d records read", err, n)
	}
}

// A write cut short by a crash leaves a torn last line: the next run starts, ends that line,
// continues the chain from the last complete record, and Read reports only the torn line.
func TestTornTailDoesNotStopStart(t *testing.T) {
	path := writeTrail(t, 3)
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b[:len(b)-20], 0o600)
	s, err := OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatalf("torn trail stopped the sink from opening: %v", err)
	}
	s.Write(context.Background(), Record{Kind: KindLease, Event: "after-crash"})
	s.Close()
	var got []Record
	err = Read(path, func(r Record) error { got = append(got, r); return nil })
	var te *TrailError
	if !errors.As(err, &te) || len(te.Problems) != 1 || te.Problems[0].Line != 3 {
		t.Fatalf("torn line reported as %v", err)
	}
	if len(got) != 3 || got[2].Event != "after-crash" || got[2].Seq != 3 {
		t.Fatalf("records after the torn line: %+v", got)
	}
}

// Garbage in place of the whole trail still opens: the chain starts afresh, and Read says why.
func TestGarbageTrailStillOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	os.WriteFile(path, []byte("not json\n\x00\xff{\"hash\":1}\n"), 0o600)
	s, err := OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatalf("garbage trail stopped the sink from opening: %v", err)
	}
	s.Write(context.Background(), Record{Kind: KindLease, Event: "bind"})
	s.Close()
	n := 0
	err = Read(path, func(Record) error { n++; return nil })
	var te *TrailError
	if !errors.As(err, &te) || len(te.Problems) != 2 || n != 1 {
		t.Fatalf("garbage trail read as %v with %d records", err, n)
	}
}

// A line longer than the reader's buffer is read whole.
func TestLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, _ := OpenFile(FileConfig{Path: path})
	big := strings.Repeat("\x01\xff", 300<<10) // escapes grow it past 3 MB on the line
	s.Write(context.Background(), Record{Kind: KindExec, Command: []string{"echo", big}})
	s.Write(context.Background(), Record{Kind: KindLease, Event: "next"})
	s.Close()
	var got []Record
	if err := Read(path, func(r Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Command[1] != big {
		t.Fatalf("long line did not read back (%d records)", len(got))
	}
	if tl, err := readTail(path); err != nil || tl.seq != 2 {
		t.Fatalf("tail of a trail with a long line: %+v %v", tl, err)
	}
}

func writeTrail(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		s.Write(context.Background(), Record{Kind: KindHTTP, Decision: Deny, Host: "a.example"})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// FuzzTrailRoundTrip: whatever bytes the fields hold, the line verifies and reads back exactly.
func FuzzTrailRoundTrip(f *testing.F) {
	f.Add("/%ff", "\xff", "a.example.", "\x1b[31m", int64(3))
	f.Add("", "", "", "", int64(0))
	f.Add("\u2028\"\\", "\xc3", "\xed\xa0\x80", "\x00", int64(-1))
	f.Fuzz(func(t *testing.T, path, reason, qname, arg string, n int64) {
		want := Record{Kind: KindHTTP, Path: path, Reason: reason, QName: qname, Command: []string{arg, path},
			BytesUp: n, Method: arg, Host: qname}
		if arg == "" {
			want.Command = nil
		}
		s := &FileSink{}
		var buf bytes.Buffer
		for range 2 {
			r := want
			if err := s.append(&buf, &r); err != nil {
				t.Fatal(err)
			}
		}
		var got []Record
		if err := readTrail(&buf, "fuzz", func(r Record) error { got = append(got, r); return nil }); err != nil {
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
