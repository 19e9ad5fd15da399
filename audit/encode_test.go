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
