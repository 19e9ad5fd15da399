package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// writeHead writes r's head in HTTP/1.1 as headSize counts it, field by field: the independent
// measure headSize is checked against.
func writeHead(r *http.Request) string {
	var b strings.Builder
	b.WriteString(r.Method + " " + r.RequestURI + " HTTP/1.1\r\n")
	b.WriteString("Host: " + r.Host + "\r\n")
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range r.Header {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, v := range r.Header[k] {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	if len(r.Trailer) > 0 {
		var names []string
		for k := range r.Trailer {
			names = append(names, k)
		}
		slices.Sort(names)
		b.WriteString("Trailer: " + strings.Join(names, ", ") + "\r\n")
	}
	for _, te := range r.TransferEncoding {
		b.WriteString("Transfer-Encoding: " + te + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// FuzzHeadSize reads request heads as the gateway's server does: headSize must be the length of
// the head written out from what was read, never less than the header fields Go writes upstream
// from it, and that written head, read again, must cost no more (a value read with whitespace
// at its end, from a folded line, counts it; written out and read again, it is trimmed).
func FuzzHeadSize(f *testing.F) {
	f.Add([]byte("GET /v1/x?a=1 HTTP/1.1\r\nHost: api.example.test\r\nX-A: 1\r\nX-A: 2\r\n\r\n"))
	f.Add([]byte("GET http://plain.example.test/v1/x HTTP/1.1\r\nHost: other\r\n\r\n"))
	f.Add([]byte("POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: x-one,X-Two\r\n\r\n"))
	f.Add([]byte("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nProxy-Authorization: Bearer t\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nX-A:  \t v \r\n  folded\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		head := writeHead(r)
		if got := headSize(r); got != int64(len(head)) {
			t.Fatalf("headSize %d, the head written out is %d bytes:\n%q", got, len(head), head)
		}
		var fields bytes.Buffer
		if err := r.Header.Write(&fields); err != nil {
			t.Fatal(err)
		}
		if n := fieldsSize(r.Header); fields.Len() > n {
			t.Fatalf("Go writes %d bytes of header fields, counted as %d:\n%q", fields.Len(), n, fields.String())
		}
		again, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			t.Fatalf("the head written out does not read again (%v):\n%q", err, head)
		}
		if got := headSize(again); got > int64(len(head)) {
			t.Fatalf("the head written out, read again, costs %d, more than its %d bytes:\n%q", got, len(head), head)
		}
	})
}

// FuzzBudgetAccounting runs meters of one lease's budget through what the gateway does with
// them, in any order: heads reserved, sent or given back, bodies and trailers read, a session's
// head taken by its first request. Whatever the order, the budget is never exceeded, and what
// it holds is exactly what the meters sent (their records) plus the heads they still hold; once
// every exchange has ended, exactly what they sent.
func FuzzBudgetAccounting(f *testing.F) {
	f.Add(uint16(1000), []byte{0, 1, 100, 0, 1, 2, 200, 0, 1, 5, 1, 0, 3, 3, 50, 50, 2, 1, 0, 0})
	f.Add(uint16(64), []byte{0, 0, 60, 0, 0, 1, 10, 0, 1, 1, 0, 0, 4, 1, 200, 0})
	f.Add(uint16(300), []byte{0, 0, 80, 0, 1, 1, 90, 10, 1, 1, 0, 0, 2, 0, 0, 0, 3, 2, 255, 255})
	f.Fuzz(func(t *testing.T, limit uint16, ops []byte) {
		u := &usage{}
		session := &meter{usage: u, limit: int64(limit), lease: "l"}
		meters := []*meter{session}
		for range 3 {
			meters = append(meters, &meter{usage: u, limit: int64(limit), lease: "l", session: session})
		}
		check := func(op string) {
			t.Helper()
			var sent, held int64
			for _, m := range meters {
				sent += m.n.Load()
				held += m.held.Load()
			}
			want := sent + held // a budget of 0 bytes is none: the meters only count
			if limit == 0 {
				want = 0
			}
			if b := u.bytesUp.Load(); b < 0 || b > int64(limit) || b != want {
				t.Fatalf("after %s: the budget holds %d of %d; the meters sent %d and hold %d", op, b, limit, sent, held)
			}
		}
		for len(ops) >= 4 {
			op, m, a, b := ops[0]%5, meters[int(ops[1])%len(meters)], int64(ops[2]), int64(ops[3])
			ops = ops[4:]
			switch op {
			case 0: // a head reserved, with a body of b announced (or none: 0)
				before := u.bytesUp.Load()
				err := m.reserveHead(a, b)
				left := int64(limit) - before
				if fits := limit == 0 || left > 0 && a <= left && a+b <= left; (err == nil) != fits {
					t.Fatalf("reserveHead(%d, %d) with %d left: %v", a, b, left, err)
				}
				check("reserveHead")
			case 1:
				m.commit()
				check("commit")
			case 2:
				m.release()
				check("release")
			case 3: // a body of a bytes read through a buffer of b+1, then its trailers (b bytes)
				m.trailer = &http.Header{"X": {strings.Repeat("t", int(b))}}
				src := strings.NewReader(strings.Repeat("x", int(a)))
				buf := make([]byte, b+1)
				var got int64
				for {
					n, err := m.read(src, buf)
					got += int64(n)
					if err != nil {
						var ref *Refusal
						if err != io.EOF && !errors.As(err, &ref) {
							t.Fatalf("read: %v", err)
						}
						break
					}
				}
				if got > a {
					t.Fatalf("read %d bytes of a %d-byte body", got, a)
				}
				m.trailer = nil
				check("read")
			case 4:
				if k := m.charge(a); k == nil && limit > 0 && u.bytesUp.Load() > int64(limit) {
					t.Fatalf("charged %d over the budget", a)
				}
				check("charge")
			}
		}
		for _, m := range meters {
			m.release()
		}
		var sent int64
		for _, m := range meters {
			sent += m.n.Load()
		}
		if b := u.bytesUp.Load(); limit > 0 && b != sent || limit == 0 && b != 0 {
			t.Fatalf("every exchange ended: the budget of %d holds %d, the meters sent %d", limit, b, sent)
		}
	})
}
