package gateway

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/rule"
)

// An attacker's review of h1Server (#34, item 4): the attacks net/http's server defended the
// gateway against, each run on h1Server and on http.Server behind the framing check, as every
// listener of the gateway is. The handlers below play what the proxy relays: an upstream's
// header values, lengths and statuses, which a hostile upstream chooses.

// reviewHostileHandler answers as a hostile upstream would have the proxy answer.
func reviewHostileHandler(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	switch r.URL.Path {
	case "/crlf-value":
		h.Set("X-A", "a\r\nSet-Cookie: evil=1")
		h["X-B"] = []string{"b\nSet-Cookie: evil=2", "c\rSet-Cookie: evil=3"}
		io.WriteString(w, "v")
	case "/crlf-key":
		h["X-C\r\nSet-Cookie"] = []string{"evil=4"}
		h["X D"] = []string{"evil=5"}
		h["X-E:"] = []string{"evil=6"}
		io.WriteString(w, "k")
	case "/crlf-1xx":
		h.Set("Link", "</a>\r\n\r\nHTTP/1.1 200 OK\r\nSet-Cookie: evil=7")
		w.WriteHeader(http.StatusEarlyHints)
		h.Del("Link")
		io.WriteString(w, "after hints")
	case "/crlf-trailer":
		h.Set("Trailer", "X-T, X-U\r\nSet-Cookie")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "t")
		h.Set("X-T", "t\r\nSet-Cookie: evil=8")
		h["X-U\r\nSet-Cookie"] = []string{"evil=9"}
		h[http.TrailerPrefix+"X-V\r\nSet-Cookie"] = []string{"evil=10"}
		h.Set(http.TrailerPrefix+"Content-Length", "99")
	case "/over-length":
		h.Set("Content-Length", "5")
		io.WriteString(w, "hello")
		io.WriteString(w, "HTTP/1.1 200 OK\r\nSet-Cookie: evil=11\r\nContent-Length: 0\r\n\r\n")
	case "/over-length-one-write":
		h.Set("Content-Length", "5")
		io.WriteString(w, "helloHTTP/1.1 200 OK\r\nSet-Cookie: evil=12\r\nContent-Length: 0\r\n\r\n")
	case "/under-length":
		h.Set("Content-Length", "100")
		io.WriteString(w, "short")
	case "/under-length-flushed":
		h.Set("Content-Length", "100")
		io.WriteString(w, "short")
		http.NewResponseController(w).Flush()
	case "/body":
		io.WriteString(w, "HTTP/1.1 200 OK\r\nSet-Cookie: evil=13\r\nContent-Length: 0\r\n\r\n")
	case "/204-body":
		w.WriteHeader(http.StatusNoContent)
		io.WriteString(w, "HTTP/1.1 200 OK\r\nSet-Cookie: evil=14\r\nContent-Length: 0\r\n\r\n")
	case "/304-body":
		h.Set("Content-Length", "61")
		w.WriteHeader(http.StatusNotModified)
		io.WriteString(w, "HTTP/1.1 200 OK\r\nSet-Cookie: evil=15\r\nContent-Length: 0\r\n\r\n")
	case "/te-identity":
		h.Set("Transfer-Encoding", "identity")
		io.WriteString(w, "raw")
	case "/te-other":
		h.Set("Transfer-Encoding", "gzip")
		io.WriteString(w, "gz")
	case "/te-and-cl":
		h.Set("Transfer-Encoding", "chunked")
		h.Set("Content-Length", "2")
		io.WriteString(w, "tc")
	case "/cl-plus":
		h.Set("Content-Length", "+2")
		io.WriteString(w, "pl")
	case "/cl-two":
		h["Content-Length"] = []string{"2", "61"}
		io.WriteString(w, "twHTTP/1.1 200 OK\r\nSet-Cookie: evil=16\r\nContent-Length: 0\r\n\r\n")
	case "/cl-crlf":
		h.Set("Content-Length", "2\r\nSet-Cookie: evil=17")
		io.WriteString(w, "cr")
	case "/cl-negative":
		h.Set("Content-Length", "-1")
		io.WriteString(w, "ng")
	case "/status-101":
		w.WriteHeader(http.StatusSwitchingProtocols) // no Upgrade: not a switch
		io.WriteString(w, "HTTP/1.1 200 OK\r\nSet-Cookie: evil=18\r\nContent-Length: 0\r\n\r\n")
	case "/status-1xx-after-final":
		w.WriteHeader(http.StatusOK)
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "f")
	case "/status-odd":
		w.WriteHeader(599)
		io.WriteString(w, "odd")
	case "/connection-keep-alive":
		h.Set("Connection", "keep-alive")
		h.Set("Content-Length", "2")
		io.WriteString(w, "ka")
	case "/connection-upgrade":
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", "websocket")
		io.WriteString(w, "up")
	case "/explicit-100":
		w.WriteHeader(http.StatusContinue)
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	case "/refuse-then-read":
		w.WriteHeader(http.StatusForbidden)
		http.NewResponseController(w).Flush()
		io.Copy(io.Discard, r.Body) // must not ask for the body now
	case "/echo":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Write(b)
	default:
		io.WriteString(w, r.Method+" "+r.URL.Path+" host="+r.Host)
	}
}

// reviewListen serves h on a new loopback listener behind the framing check, on h1Server
// (std false) or http.Server as the gateway configured it.
func reviewListen(t *testing.T, std bool, h http.Handler, refused func(string)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := NewFramingListener(l, func(_ net.Addr, why string) {
		if refused != nil {
			refused(why)
		}
	})
	if std {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second,
			ErrorLog: log.New(io.Discard, "", 0)}
		go srv.Serve(fl)
		t.Cleanup(func() { srv.Close() })
	} else {
		s := newH1Server(h, nil)
		go s.Serve(fl)
		t.Cleanup(func() { s.Close() })
	}
	return l.Addr().String()
}

var reviewDates = regexp.MustCompile(`Date: [^\r]*\r\n`)

// reviewNoInjectedHeadLine fails when out has a line, at a line's start, that a hostile value
// meant to inject: a Set-Cookie of the handlers above or a status line after a body the
// client was told was complete.
func reviewNoInjectedHeadLine(t *testing.T, in, out string) {
	t.Helper()
	for _, l := range regexp.MustCompile(`\r?\n`).Split(out, -1) {
		if strings.HasPrefix(strings.ToLower(l), "set-cookie") {
			t.Errorf("answer to %q has an injected header line %q:\n%q", in, l, out)
		}
	}
}

// TestReviewH1HostileAnswersAsNetHTTP: what a hostile upstream makes the handler write
// (header values and names with CR or LF, more or fewer bytes than its Content-Length, a body
// on HEAD, 204, 304 and 1xx, odd Transfer-Encodings and Content-Lengths) reaches the sandbox
// as net/http's server wrote it, every answer framed so that a request pipelined after it gets
// its own answer, and no injected header line at a line's start.
func TestReviewH1HostileAnswersAsNetHTTP(t *testing.T) {
	const next = "GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
	const end = "GET /end HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
	paths := []string{"/crlf-value", "/crlf-key", "/crlf-1xx", "/crlf-trailer", "/over-length", "/over-length-one-write",
		"/under-length", "/under-length-flushed", "/body", "/204-body", "/304-body", "/te-identity", "/te-other",
		"/te-and-cl", "/cl-plus", "/cl-two", "/cl-crlf", "/cl-negative", "/status-101", "/status-1xx-after-final",
		"/status-odd", "/connection-keep-alive", "/connection-upgrade"}
	// The paths whose hostile bytes must never reach the sandbox where a client reads a head.
	injecting := map[string]bool{"/crlf-value": true, "/crlf-key": true, "/crlf-1xx": true, "/crlf-trailer": true,
		"/over-length": true, "/over-length-one-write": true, "/204-body": true, "/304-body": true, "/cl-two": true,
		"/cl-crlf": true, "/status-101": true}
	ours := reviewListen(t, false, http.HandlerFunc(reviewHostileHandler), nil)
	std := reviewListen(t, true, http.HandlerFunc(reviewHostileHandler), nil)
	for _, p := range paths {
		for _, v := range []struct{ method, proto string }{{"GET", "HTTP/1.1"}, {"HEAD", "HTTP/1.1"}, {"GET", "HTTP/1.0"}} {
			hdr := "Host: a\r\n"
			if v.proto == "HTTP/1.0" {
				hdr += "Connection: keep-alive\r\n"
			}
			in := v.method + " " + p + " " + v.proto + "\r\n" + hdr + "\r\n" + next + end
			t.Run(v.method+" "+v.proto+" "+p, func(t *testing.T) {
				got := reviewDates.ReplaceAllString(exchangeRaw(t, ours, in), "Date: -\r\n")
				want := reviewDates.ReplaceAllString(exchangeRaw(t, std, in), "Date: -\r\n")
				if got != want {
					t.Errorf("h1Server answered\n%q\nhttp.Server\n%q", got, want)
				}
				if injecting[p] || p == "/body" && v.method == "HEAD" {
					reviewNoInjectedHeadLine(t, in, got)
				}
			})
		}
	}
}

// reviewRecorder serves reviewHostileHandler and notes each request the handler was given.
type reviewRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (rr *reviewRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rr.mu.Lock()
	rr.seen = append(rr.seen, r.Method+" "+r.RequestURI+" "+r.Proto+" host="+r.Host+" cl="+strconv.FormatInt(r.ContentLength, 10)+
		" te="+strings.Join(r.TransferEncoding, ","))
	rr.mu.Unlock()
	reviewHostileHandler(w, r)
}

func (rr *reviewRecorder) requests() []string {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return append([]string(nil), rr.seen...)
}

// TestReviewH1SmugglingAsNetHTTP: request shapes used to smuggle a request past a check (both
// lengths, Transfer-Encoding variants, folding, duplicate lengths, bare LF and CR, NUL, two or
// no Host, an absolute-form target whose Host differs, pipelining behind a body left unread,
// Expect variants, an Upgrade or CONNECT the handler does not take) reach the handler as the
// same requests, and are answered with the same bytes, on h1Server as on http.Server, both
// behind the framing check; the ones the framing check refuses are refused and recorded on both.
func TestReviewH1SmugglingAsNetHTTP(t *testing.T) {
	const next = "GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
	const end = "GET /end HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: b\r\n\r\n"
	cases := []struct{ name, in string }{
		{"cl and te", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled + end},
		{"te and cl", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n" + smuggled + end},
		{"te chunked, identity", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + smuggled + end},
		{"te identity, chunked", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n" + smuggled + end},
		{"te twice", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled + end},
		{"te upper case", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + next + end},
		{"te tab", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\t\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + next + end},
		{"te quoted", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + next + end},
		{"te vertical tab", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\x0bchunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + next + end},
		{"te name with space", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + next + end},
		{"te folded", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + next + end},
		{"te behind bare lf", "POST /echo HTTP/1.1\r\nHost: a\r\nX: y\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n" + smuggled + end},
		{"cl behind bare lf", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nX: y\nContent-Length: 40\r\n\r\nabc" + smuggled + end},
		{"head ended by bare lf", "POST /echo HTTP/1.1\r\nHost: a\r\n\nContent-Length: 40\r\n\r\n" + smuggled + end},
		{"all bare lf", "POST /echo HTTP/1.1\nHost: a\nContent-Length: 3\n\nabc" + next + end},
		{"bare cr in a value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rContent-Length: 40\r\n\r\n" + smuggled + end},
		{"bare cr ends the head", "GET / HTTP/1.1\r\nHost: a\r\n\r" + smuggled + end},
		{"nul in a value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n" + next + end},
		{"nul in a name", "GET / HTTP/1.1\r\nHost: a\r\nX\x00: b\r\n\r\n" + next + end},
		{"two cl, same", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc" + next + end},
		{"cl list", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc" + next + end},
		{"cl plus", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc" + next + end},
		{"cl leading zeros", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 0003\r\n\r\nabc" + next + end},
		{"cl hex", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\nabc" + next + end},
		{"cl huge", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\nabc" + next + end},
		{"chunk size 0x", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n" + next + end},
		{"chunk size overflow", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000003\r\nabc\r\n0\r\n\r\n" + next + end},
		{"chunk data longer", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n" + next + end},
		{"chunk ext bare lf", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x\nabc\r\n0\r\n\r\n" + next + end},
		{"trailer with a length", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nContent-Length: 40\r\n\r\n" + next + end},
		{"trailer bare lf", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: y\n\r\n" + smuggled + end},
		{"two host", "GET /p HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" + next + end},
		{"two host, http/1.0", "GET /p HTTP/1.0\r\nHost: a\r\nHost: b\r\nConnection: keep-alive\r\n\r\n" + next + end},
		{"no host", "GET /p HTTP/1.1\r\n\r\n" + next + end},
		{"no host, absolute form", "GET http://b.example/p HTTP/1.1\r\n\r\n" + next + end},
		{"host differs from the absolute form", "GET http://b.example/p HTTP/1.1\r\nHost: c.example\r\n\r\n" + next + end},
		{"empty host, absolute form", "GET http://b.example/p HTTP/1.1\r\nHost:\r\n\r\n" + next + end},
		{"host with userinfo", "GET /p HTTP/1.1\r\nHost: a@b.example\r\n\r\n" + next + end},
		{"host with a path", "GET /p HTTP/1.1\r\nHost: b.example/x\r\n\r\n" + next + end},
		{"host with a bad port", "GET /p HTTP/1.1\r\nHost: b.example:99999\r\n\r\n" + next + end},
		{"host folded", "GET /p HTTP/1.1\r\nHost: a\r\n .evil\r\n\r\n" + next + end},
		{"absolute form, userinfo", "GET http://a@b.example/p HTTP/1.1\r\nHost: b.example\r\n\r\n" + next + end},
		{"absolute form, https", "GET https://b.example/p HTTP/1.1\r\nHost: b.example\r\n\r\n" + next + end},
		{"http/0.9", "GET /p\r\n\r\n" + next + end},
		{"http/1.2", "GET /p HTTP/1.2\r\nHost: a\r\n\r\n" + next + end},
		{"http/1.0 lower case", "GET /p http/1.0\r\n\r\n" + next + end},
		{"request line with a tab", "GET\t/p HTTP/1.1\r\nHost: a\r\n\r\n" + next + end},
		{"request line, three spaces", "GET /p HTTP/1.1 x\r\nHost: a\r\n\r\n" + next + end},
		{"method lower case", "get /p HTTP/1.1\r\nHost: a\r\n\r\n" + next + end},
		{"body left unread, pipelined", "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: " + strconv.Itoa(len(smuggled)) + "\r\n\r\n" + smuggled + end},
		{"chunked body left unread, pipelined", "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(smuggled)), 16) + "\r\n" + smuggled + "\r\n0\r\n\r\n" + end},
		{"body left unread, http/1.0 keep-alive", "POST /p HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: " + strconv.Itoa(len(smuggled)) + "\r\n\r\n" + smuggled + end},
		{"expect, upper case", "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\nabc" + next + end},
		{"expect, list", "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, foo\r\nContent-Length: 3\r\n\r\nabc" + next + end},
		{"expect, http/1.0", "POST /echo HTTP/1.0\r\nExpect: 100-continue\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc" + next + end},
		{"expect, refused then read", "POST /refuse-then-read HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc" + next + end},
		{"expect, explicit 100", "POST /explicit-100 HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc" + next + end},
		{"expect, chunked", "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + next + end},
		{"upgrade not taken", "GET /p HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n" + next + end},
		{"connect not taken", "CONNECT b.example:443 HTTP/1.1\r\n\r\n" + next + end},
		{"connect with a body", "CONNECT b.example:443 HTTP/1.1\r\nContent-Length: " + strconv.Itoa(len(smuggled)) + "\r\n\r\n" + smuggled + end},
		{"connect, http/1.0", "CONNECT b.example:443 HTTP/1.0\r\n\r\n" + next + end},
		{"connection close, keep-alive", "GET /p HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n" + smuggled},
		{"connection close twice", "GET /p HTTP/1.1\r\nHost: a\r\nConnection: x\r\nConnection: close\r\n\r\n" + smuggled},
		{"proxy-connection close", "GET /p HTTP/1.1\r\nHost: a\r\nProxy-Connection: close\r\n\r\n" + next + end},
		{"options star", "OPTIONS * HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc" + next + end},
		{"leading blank lines", "\r\n\r\n\n\nGET /p HTTP/1.1\r\nHost: a\r\n\r\n" + next + end},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var answers [2]string
			var seen [2][]string
			var refusals [2][]string
			for i, std := range []bool{false, true} {
				var mu sync.Mutex
				rr := &reviewRecorder{}
				addr := reviewListen(t, std, rr, func(why string) {
					mu.Lock()
					refusals[i] = append(refusals[i], why)
					mu.Unlock()
				})
				answers[i] = reviewDates.ReplaceAllString(exchangeRaw(t, addr, tc.in), "Date: -\r\n")
				seen[i] = rr.requests()
				mu.Lock()
				refusals[i] = append([]string(nil), refusals[i]...)
				mu.Unlock()
			}
			if answers[0] != answers[1] {
				t.Errorf("h1Server answered\n%q\nhttp.Server\n%q", answers[0], answers[1])
			}
			if strings.Join(seen[0], "\n") != strings.Join(seen[1], "\n") {
				t.Errorf("h1Server's handler was given\n%q\nhttp.Server's\n%q", seen[0], seen[1])
			}
			if strings.Join(refusals[0], "\n") != strings.Join(refusals[1], "\n") {
				t.Errorf("framing refusals recorded: h1Server %q, http.Server %q", refusals[0], refusals[1])
			}
			for _, r := range seen[0] {
				if strings.HasPrefix(r, "GET /smuggled ") {
					t.Errorf("a request hidden in another's body or head reached the handler: %q (all %q)", r, seen[0])
				}
			}
		})
	}
}

// reviewRecordsFor returns the HTTP records of path written so far.
func reviewRecordsFor(m *memSink, path string) []audit.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []audit.Record
	for _, r := range m.recs {
		if r.Path == path && r.Method != "" && r.Method != http.MethodConnect {
			out = append(out, r)
		}
	}
	return out
}

// TestReviewH1InterceptedPipelineOneRecordEach: requests pipelined on an intercepted session
// (served by h1Server), allowed and refused in turn, a refusal keeping the connection, are
// answered in order and each gets exactly one decision record with its own outcome.
func TestReviewH1InterceptedPipelineOneRecordEach(t *testing.T) {
	h := newHarness(t)
	tc := h.intercept(t, "api.example.test:443")
	const host = "Host: api.example.test\r\n"
	io.WriteString(tc, "GET /v1/a HTTP/1.1\r\n"+host+"\r\n"+
		"GET /admin HTTP/1.1\r\n"+host+"\r\n"+
		"DELETE /v1/b HTTP/1.1\r\n"+host+"\r\n"+
		"POST /v1/c HTTP/1.1\r\n"+host+"Content-Length: 3\r\n\r\nabc"+
		"GET /v1/d HTTP/1.1\r\n"+host+"Connection: close\r\n\r\n")
	br := bufio.NewReader(tc)
	want := []struct {
		path     string
		status   int
		decision audit.Decision
	}{
		{"/v1/a", 200, audit.Allow}, {"/admin", 403, audit.Deny}, {"/v1/b", 403, audit.Deny},
		{"/v1/c", 200, audit.Allow}, {"/v1/d", 200, audit.Allow},
	}
	for _, w := range want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the answer to %s: %v", w.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != w.status {
			t.Errorf("%s answered %d (%q), want %d", w.path, resp.StatusCode, b, w.status)
		}
		if w.status == 200 && !strings.Contains(string(b), "path="+w.path) {
			t.Errorf("%s answered %q: another request's answer", w.path, b)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close the session was not closed: %v", err)
	}
	for _, w := range want {
		if err := wait.Until(2*time.Second, "the record of "+w.path, func() bool { return len(reviewRecordsFor(h.sink, w.path)) > 0 }); err != nil {
			t.Fatal(err)
		}
	}
	// One more request, on another session, recorded after them: nothing more is coming for
	// the pipelined ones.
	if status, _ := rawIntercepted(t, h, "GET /v1/last HTTP/1.1\r\n"+host+"Connection: close\r\n\r\n"); status != 200 {
		t.Fatalf("GET /v1/last: %d", status)
	}
	if err := wait.Until(2*time.Second, "the record of /v1/last", func() bool { return len(reviewRecordsFor(h.sink, "/v1/last")) > 0 }); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		recs := reviewRecordsFor(h.sink, w.path)
		if len(recs) != 1 || recs[0].Decision != w.decision {
			t.Errorf("records of %s: %+v, want one %s", w.path, recs, w.decision)
		}
	}
}

// TestReviewH1InterceptedClientCloseCancelsUpstream: a sandbox that closes its intercepted
// session while the upstream is still working (before its answer, or while the answer
// streams) has the upstream request cancelled (the gateway's own request to it ends), and
// that request gets exactly one record.
func TestReviewH1InterceptedClientCloseCancelsUpstream(t *testing.T) {
	for _, tc := range []struct{ name, req string }{
		{"no body", "GET /v1/slow HTTP/1.1\r\nHost: api.example.test\r\n\r\n"},
		{"body read whole", "POST /v1/slow HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 3\r\n\r\nabc"},
		{"answer streaming", "GET /v1/slow?stream=1 HTTP/1.1\r\nHost: api.example.test\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			started, cancelled := make(chan struct{}), make(chan struct{})
			h.answer(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/slow" {
					io.WriteString(w, "path="+r.URL.Path)
					return
				}
				io.Copy(io.Discard, r.Body)
				if r.URL.Query().Get("stream") != "" {
					w.Write(bytes.Repeat([]byte("x"), 64<<10)) // more than the scrubber holds back
					http.NewResponseController(w).Flush()
				}
				close(started)
				select {
				case <-r.Context().Done():
					close(cancelled)
				case <-time.After(10 * time.Second):
				}
			})
			s := h.intercept(t, "api.example.test:443")
			io.WriteString(s, tc.req)
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream was not asked within 5 s")
			}
			if strings.Contains(tc.req, "stream=1") {
				br := bufio.NewReader(s)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("the streamed answer's head: %v", err)
				}
				b := make([]byte, 1024)
				if _, err := io.ReadFull(resp.Body, b); err != nil || b[0] != 'x' {
					t.Fatalf("the streamed answer's first part: %q, %v", b, err)
				}
			}
			s.Close()
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream request went on 5 s after the sandbox closed its session")
			}
			if err := wait.Until(2*time.Second, "the record of /v1/slow", func() bool { return len(reviewRecordsFor(h.sink, "/v1/slow")) > 0 }); err != nil {
				t.Fatal(err)
			}
			if status, _ := rawIntercepted(t, h, "GET /v1/last HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n"); status != 200 {
				t.Fatalf("GET /v1/last: %d", status)
			}
			if err := wait.Until(2*time.Second, "the record of /v1/last", func() bool { return len(reviewRecordsFor(h.sink, "/v1/last")) > 0 }); err != nil {
				t.Fatal(err)
			}
			if recs := reviewRecordsFor(h.sink, "/v1/slow"); len(recs) != 1 {
				t.Errorf("records of /v1/slow: %+v, want one", recs)
			}
		})
	}
}

// TestReviewH1SandboxListenerAfterRefusals: on the sandbox's listener (Proxy.Serve, h1Server
// behind the framing check), a refused CONNECT and a refused request keep the connection as
// HTTP: the bytes a client sends after a refused CONNECT, as if the tunnel were open, are read
// as the next request and checked, never passed on, and a smuggling shape sent after the
// refusals is still refused and recorded; each request gets one record.
func TestReviewH1SandboxListenerAfterRefusals(t *testing.T) {
	h := newHarness(t)
	addr := serveHarness(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT denied.example.test:443 HTTP/1.1\r\nHost: denied.example.test:443\r\n\r\n"+
		"GET http://plain.example.test/v1/after-connect HTTP/1.1\r\nHost: plain.example.test\r\n\r\n"+
		"GET http://denied.example.test/x HTTP/1.1\r\nHost: denied.example.test\r\n\r\n"+
		"GET http://plain.example.test/v1/after-deny HTTP/1.1\r\nHost: plain.example.test\r\n\r\n")
	smuggle := ("POST http://plain.example.test/v1/smuggle HTTP/1.1\r\nHost: plain.example.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
		"GET http://plain.example.test/v1/smuggled HTTP/1.1\r\nHost: plain.example.test\r\n\r\n")
	br := bufio.NewReader(c)
	for _, w := range []struct {
		what   string
		status int
		body   string
	}{
		{"the CONNECT out of scope", 403, ""},
		{"the request after it", 200, "plain path=/v1/after-connect"},
		{"a request out of scope", 403, ""},
		{"the request after it", 200, "plain path=/v1/after-deny"},
		{"both lengths", 400, ""},
	} {
		if w.what == "both lengths" {
			io.WriteString(c, smuggle) // after the answers above: the framing check reads ahead
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatalf("the answer to %s: %v", w.what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != w.status || w.body != "" && string(b) != w.body {
			t.Fatalf("%s answered %d %q, want %d %q", w.what, resp.StatusCode, b, w.status, w.body)
		}
	}
	if rest, err := io.ReadAll(br); len(rest) != 0 || err != nil {
		t.Errorf("after the framing refusal: %q, %v; want the connection closed", rest, err)
	}
	for _, u := range h.received() {
		if strings.Contains(u, "smuggle") {
			t.Errorf("the upstream received %q", u)
		}
	}
	if _, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == rule.BadRequest && r.Decision == audit.Deny }); !ok {
		t.Error("the framing refusal was not recorded")
	}
	for _, p := range []string{"/v1/after-connect", "/v1/after-deny", "/x"} {
		if err := wait.Until(2*time.Second, "the record of "+p, func() bool { return len(reviewRecordsFor(h.sink, p)) > 0 }); err != nil {
			t.Fatal(err)
		}
		if recs := reviewRecordsFor(h.sink, p); len(recs) != 1 {
			t.Errorf("records of %s: %+v, want one", p, recs)
		}
	}
}

// TestReviewH1BodyReadAfterHandlerEnds: a handler that returns while a goroutine of its own is
// still blocked reading the request body (http.Transport's writer, when the upstream answers
// before the body is sent: the proxy hands it r.Body) does not keep that read on a connection
// the loop has finished with: the read ends with an error, without the client sending or
// closing, before the connection's buffers go back to be reused by another connection; the
// bytes the client sends afterwards reach no one; a connection after it is served as sent. (A
// body small enough to drain is drained before the answer, which waits for that read as
// net/http's server does, so the client must send the rest or close.)
func TestReviewH1BodyReadAfterHandlerEnds(t *testing.T) {
	for _, tc := range []struct{ name, head string }{
		{"too large to drain", "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n"},
		{"expecting 100-continue", "POST /upload HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			firstRead := make(chan struct{})
			readEnded := make(chan error, 1)
			var after atomic.Int64 // bytes the lingering reader got after its first read
			var seen sync.Map
			s := newH1Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen.Store(r.URL.Path, true)
				if r.URL.Path != "/upload" {
					io.WriteString(w, "ok "+r.URL.Path)
					return
				}
				go func() {
					buf := make([]byte, 512) // reads smaller than the connection's buffer
					n, err := r.Body.Read(buf)
					close(firstRead)
					if err != nil {
						readEnded <- err
						return
					}
					_ = n
					for {
						n, err := r.Body.Read(buf)
						after.Add(int64(n))
						if err != nil {
							readEnded <- err
							return
						}
					}
				}()
				<-firstRead
				cr := &w.(*h1Response).c.r
				if err := wait.Until(5*time.Second, "the handler's goroutine to block reading the connection", func() bool {
					cr.mu.Lock()
					defer cr.mu.Unlock()
					return cr.inRead
				}); err != nil {
					t.Error(err)
				}
				w.WriteHeader(http.StatusForbidden)
			}), nil)
			addr := listenH1(t, s)
			a, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			a.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(a, tc.head+"0123456789")
			br := bufio.NewReader(a)
			resp, err := http.ReadResponse(br, nil)
			for err == nil && resp.StatusCode == http.StatusContinue {
				resp, err = http.ReadResponse(br, nil)
			}
			if err != nil || resp.StatusCode != http.StatusForbidden {
				t.Fatalf("the answer to the upload: %v, %v", resp, err)
			}
			select {
			case err := <-readEnded:
				if err == nil {
					t.Fatal("the lingering read ended without an error")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the handler's goroutine was still reading the connection 5 s after its handler returned")
			}
			b, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(a, "GET /from-a HTTP/1.1\r\nHost: a\r\n\r\n") // may fail: a is closing
			io.WriteString(b, "GET /from-b HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
			out, _ := io.ReadAll(b)
			if !strings.HasSuffix(string(out), "ok /from-b") {
				t.Errorf("the next connection's request answered %q", out)
			}
			if _, ok := seen.Load("/from-a"); ok {
				t.Error("a request sent on a connection the server had finished with was served")
			}
			if n := after.Load(); n != 0 {
				t.Errorf("the lingering read got %d bytes after its handler returned", n)
			}
		})
	}
}

// TestReviewH1GoroutinesEndWithTheirConnections: connections whose requests outlast the watch
// (so each starts a background read), some pipelining, some closing mid-request, leave no
// goroutine behind once they are closed.
func TestReviewH1GoroutinesEndWithTheirConnections(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	s := newH1Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "done")
	}), nil)
	var watchStarts atomic.Int32
	s.watched = func(event string, _ int) {
		if event == "started" {
			watchStarts.Add(1)
		}
	}
	addr := listenH1(t, s)
	// The listener's accept loop and the pools settle first.
	warm, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()
	base := runtime.NumGoroutine()
	const n = 20
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		defer c.Close()
		req := "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"
		if i%2 == 0 {
			req += req // pipelined: the watch reads the second one's first byte
		}
		io.WriteString(c, req)
	}
	if err := wait.Until(5*time.Second, "every connection's request in its handler with its watch started", func() bool {
		return started.Load() == n && watchStarts.Load() >= n
	}); err != nil {
		t.Fatal(err)
	}
	for i, c := range conns {
		if i%4 == 1 {
			c.Close() // mid-request
		}
	}
	close(release)
	for i, c := range conns {
		if i%4 != 1 {
			c.Close()
		}
	}
	var now int
	if err := wait.Until(5*time.Second, "the server's goroutines to end with their connections", func() bool {
		now = runtime.NumGoroutine()
		return now <= base
	}); err != nil {
		t.Fatalf("%v: %d goroutines, %d before the connections", err, now, base)
	}
}

// TestReviewH1ProxyCloseEndsKeptConnections: Proxy.Close ends the sandbox connections h1Server
// keeps alive, idle after an answer or in the middle of a request head, as http.Server's Close
// did.
func TestReviewH1ProxyCloseEndsKeptConnections(t *testing.T) {
	h := newHarness(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := h.proxyHandler()
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	idle, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(idle, "GET http://plain.example.test/v1/a HTTP/1.1\r\nHost: plain.example.test\r\n\r\n")
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the first request: %v, %v", resp, err)
	}
	io.ReadAll(resp.Body)
	half, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	half.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(half, "GET http://plain.example.test/v1/b HTTP/1.1\r\nHost: pl")
	if err := wait.Until(5*time.Second, "the server to track both connections", func() bool {
		p.srvMu.Lock()
		s := p.srv
		p.srvMu.Unlock()
		if s == nil {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 2
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(br); len(rest) != 0 || err != nil {
		t.Errorf("the idle connection after Close: %q, %v; want it closed", rest, err)
	}
	if rest, err := io.ReadAll(half); len(rest) != 0 || err != nil {
		t.Errorf("the connection mid-head after Close: %q, %v; want it closed", rest, err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve returned %v after Close", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Serve did not return within 5 s of Close")
	}
}

// TestReviewH1InterceptedHostAgainstTarget: inside an intercepted session (h1Server), the host
// checked against the CONNECT target is the one the request is sent to: an absolute-form
// target naming another host is refused whatever its Host header says, one naming the target
// is sent there whatever its Host header says, two Host headers or an empty one are refused;
// the refused never reach an upstream, and each is recorded.
func TestReviewH1InterceptedHostAgainstTarget(t *testing.T) {
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"absolute form names another host", "GET https://open.example.test/v1/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 403},
		{"absolute form names another port", "GET https://api.example.test:8443/v1/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 403},
		{"absolute form names the target, Host another", "GET https://api.example.test/v1/x HTTP/1.1\r\nHost: open.example.test\r\n\r\n", 200},
		{"two Host headers", "GET /v1/x HTTP/1.1\r\nHost: api.example.test\r\nHost: open.example.test\r\n\r\n", 400},
		{"empty Host", "GET /v1/x HTTP/1.1\r\nHost:\r\n\r\n", 400},
		{"Host with userinfo", "GET /v1/x HTTP/1.1\r\nHost: api.example.test@open.example.test\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			before := h.sink.count()
			status, _ := rawIntercepted(t, h, tc.req)
			if status != tc.status {
				t.Fatalf("answered %d, want %d", status, tc.status)
			}
			got := h.received()
			if tc.status == 200 {
				if len(got) != 1 || got[0] != "/v1/x" {
					t.Fatalf("the upstream (api.example.test) received %q", got)
				}
			} else if len(got) != 0 {
				t.Fatalf("a refused request reached the upstream: %q", got)
			}
			if err := wait.Until(2*time.Second, "the request's record", func() bool { return h.sink.count() > before }); err != nil {
				t.Fatal(err)
			}
		})
	}
}
