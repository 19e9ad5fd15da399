package gateway

import (
	"testing"
)

// FuzzFraming feeds request bytes to the framing check whole and one byte at a time: it must
// never panic, and both ways must reach the same verdict.
func FuzzFraming(f *testing.F) {
	for _, sh := range smugglingShapes {
		f.Add([]byte(sh.head + sh.body))
	}
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n\x16\x03\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		whole := &framingConn{}
		r1 := whole.scan(append([]byte(nil), data...))
		bytewise := &framingConn{}
		r2 := ""
		for i := range data {
			if r2 = bytewise.scan([]byte{data[i]}); r2 != "" {
				break
			}
		}
		if (r1 == "") != (r2 == "") {
			t.Fatalf("verdicts differ: whole %q, byte-wise %q", r1, r2)
		}
	})
}
