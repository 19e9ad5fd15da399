package audit

import (
	"encoding/json"
	"testing"
	"time"
)

// The trail's own encoder must write exactly what encoding/json would, so any JSON reader sees
// the same record that was hashed.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	code := 3
	recs := []Record{
		{},
		{Time: time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC), Kind: KindHTTP, Node: "n", Lease: "l-1",
			Decision: Allow, Rule: "scope", Method: "GET", Host: "a.example", Port: 443, Path: "/x", Status: 200,
			BytesUp: 1, BytesDown: 2, DurationMS: 0.123, Seq: 7, Prev: "ab"},
		{Kind: KindDNS, QName: "a.\"b\\c\n\t\x01\x7f.", QType: "A", Answers: 2, Flagged: true, Reason: "valid utf8 \u2028 é <&>"},
		{Kind: KindExec, Command: []string{"sh", "-c", "echo \"hi\""}, ExitCode: &code, SHA256: "00", Size: 9, Hash: "h",
			Stdin: &Stream{SHA256: "e3"}, Stdout: &Stream{Size: 3, SHA256: "ab", Head: "hi\n"}},
		{Kind: KindLease, Event: "bind", Template: "default", Runtime: "runsc", Scopes: []string{"a.example:443"}},
		{Kind: KindAudit, Event: EventRetention, Segment: "s", Through: 9, Head: "h", Note: "n\n"},
	}
	for i, r := range recs {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		// encoding/json escapes <, > and & for HTML; the trail does not need to.
		want = []byte(unescapeHTML(string(want)))
		if got := (&encoder{}).appendJSON(nil, &r); string(got) != string(want) {
			t.Errorf("record %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func unescapeHTML(s string) string {
	for _, p := range [][2]string{{`\u003c`, "<"}, {`\u003e`, ">"}, {`\u0026`, "&"}} {
		for {
			i := indexOf(s, p[0])
			if i < 0 {
				break
			}
			s = s[:i] + p[1] + s[i+len(p[0]):]
		}
	}
	return s
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func BenchmarkAppend(b *testing.B) {
	r := Record{Time: time.Now(), Kind: KindHTTP, Node: "n", Lease: "l-1", Task: "t", Source: "10.0.0.2",
		Decision: Allow, Rule: "scope", Method: "GET", Host: "a.example", Port: 443, Path: "/x", Status: 200,
		BytesUp: 1, BytesDown: 2, DurationMS: 0.123}
	s := &FileSink{}
	b.ReportAllocs()
	for b.Loop() {
		s.line(&r)
	}
}

// The encoder formats a record's time once per second and only the fraction per record: what it
// writes must still be time.RFC3339Nano's text for every time, location and fraction, including
// the ones that follow each other within a second.
func TestAppendTimeMatchesRFC3339Nano(t *testing.T) {
	locs := []*time.Location{time.UTC, time.Local, time.FixedZone("", -(3*3600 + 30*60)), time.FixedZone("X", 5*3600+45*60)}
	base := []time.Time{
		time.Date(2026, 12, 3, 18, 5, 26, 0, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 100, time.UTC),
		time.Date(-5, 3, 1, 0, 0, 0, 10, time.UTC),
		time.Now(),
	}
	fracs := []int{0, 1, 10, 100, 120, 123456789, 500000000, 999999999, 100000000, 1000}
	var e encoder
	for _, b := range base {
		for _, loc := range locs {
			for _, f := range fracs {
				tm := b.Truncate(time.Second).Add(time.Duration(f)).In(loc)
				want := tm.AppendFormat(nil, time.RFC3339Nano)
				e.b = e.b[:0]
				e.appendTime(tm)
				if string(e.b) != string(want) {
					t.Errorf("%v: got %s, want %s", tm, e.b, want)
				}
			}
		}
	}
}
