package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// h1TestHandler is what the serve loop's tests serve, both on h1Server and on http.Server: each
// path exercises one thing a handler does with its answer or its request.
func h1TestHandler(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/small":
		io.WriteString(w, "hello")
	case "/big":
		for range 3 {
			w.Write(bytes.Repeat([]byte("a"), 2000))
		}
	case "/typed":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"a":1}`)
	case "/cl":
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	case "/short":
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "hello")
	case "/nocontent":
		w.WriteHeader(http.StatusNoContent)
	case "/notmodified":
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "5")
		w.WriteHeader(http.StatusNotModified)
	case "/trailer":
		w.Header().Set("Trailer", "X-T")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "x")
		w.Header().Set("X-T", "v")
		w.Header().Set(http.TrailerPrefix+"X-U", "u")
	case "/early":
		w.Header().Set("Link", "</a>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "after hints")
	case "/flush":
		io.WriteString(w, "a")
		http.NewResponseController(w).Flush()
		io.WriteString(w, "b")
	case "/close":
		w.Header().Set("Connection", "close")
		io.WriteString(w, "x")
	case "/echo":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "read %d, then: %v", len(b), err)
			return
		}
		w.Write(b)
	case "/refuse":
		w.WriteHeader(http.StatusForbidden) // the body is not read
	case "/afterheader":
		w.WriteHeader(http.StatusAccepted)
		w.Header().Set("X-Late", "not sent") // changes after WriteHeader are not the head's
		io.WriteString(w, "z")
	case "/abort":
		io.WriteString(w, "partial")
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	case "/panic":
		panic("handler bug")
	case "/hijack":
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		rest, _ := io.ReadAll(brw) // up to the client's CloseWrite
		fmt.Fprintf(conn, "HIJACKED %q", rest)
	default:
		fmt.Fprintf(w, "%s %s %s host=%q", r.Method, r.RequestURI, r.Proto, r.Host)
	}
}

// exchangeRaw writes in to a new connection to addr and reads until the server closes it.
func exchangeRaw(t *testing.T, addr, in string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		io.WriteString(c, in)
		c.(*net.TCPConn).CloseWrite() // a body short of its length ends here
	}()
	out, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the answer to %q (waited for the server to close the connection): %v; got %q", in, err, out)
	}
	return string(out)
}

func listenH1(t *testing.T, s *h1Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return l.Addr().String()
}

func listenStd(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

var dates = regexp.MustCompile(`Date: [^\r]*\r\n`)

// TestH1ServerAnswersAsNetHTTP serves the same requests on h1Server and on http.Server and
// requires the same bytes back (the Date aside): status lines, headers added (Content-Length,
// Content-Type, Connection, Transfer-Encoding), chunking, trailers, 1xx, bodies left unread,
// 100-continue, HTTP/1.0, malformed requests and their 400/431/505/417, panics and hijacks.
func TestH1ServerAnswersAsNetHTTP(t *testing.T) {
	const end = "GET /end HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
	cases := []struct{ name, in string }{
		{"small", "GET /small HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"big, chunked", "GET /big HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"typed", "GET /typed HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"content-length", "GET /cl HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"short of its content-length", "GET /short HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"head", "HEAD /small HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"204", "GET /nocontent HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"304", "GET /notmodified HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"trailers", "GET /trailer HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"103 then 200", "GET /early HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"flush", "GET /flush HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"handler's connection close", "GET /close HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"client's connection close", "GET /small HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" + end},
		{"header after WriteHeader", "GET /afterheader HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"echo, content-length", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc" + end},
		{"echo, chunked", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: v\r\n\r\n" + end},
		{"body left unread, drained", "POST /refuse HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc" + end},
		{"body left unread, chunked, drained", "POST /refuse HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + end},
		{"body too large to drain", "POST /refuse HTTP/1.1\r\nHost: a\r\nContent-Length: 300000\r\n\r\n" + strings.Repeat("b", 300000) + end},
		{"body failing midway", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n" + end},
		{"body short of its length", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc"},
		{"100-continue, read", "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc" + end},
		{"100-continue, refused unread", "POST /refuse HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc" + end},
		{"100-continue, no body", "GET /small HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n" + end},
		{"other expectation", "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 3\r\n\r\nabc" + end},
		{"http/1.0", "GET /small HTTP/1.0\r\n\r\n" + end},
		{"http/1.0 keep-alive, length known", "GET /cl HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + end},
		{"http/1.0 keep-alive, length unknown", "GET /big HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + end},
		{"pipelined", "GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: b\r\n\r\nGET /c HTTP/1.1\r\nHost: c\r\n\r\n" + end},
		{"leading CRLF", "\r\nGET /small HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"options star", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"absolute form", "GET http://b.example/x HTTP/1.1\r\nHost: b.example\r\n\r\n" + end},
		{"connect", "CONNECT b.example:443 HTTP/1.1\r\n\r\n" + end},
		{"two host headers", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" + end},
		{"no host", "GET / HTTP/1.1\r\n\r\n" + end},
		{"malformed host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n" + end},
		{"control byte in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01c\r\n\r\n" + end},
		{"space in a name", "GET / HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n" + end},
		{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nXA\r\n\r\n" + end},
		{"obsolete folding", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n" + end},
		{"unsupported transfer encoding", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n" + end},
		{"content-length and chunked", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + end},
		{"two content-lengths", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd" + end},
		{"http/2 request line", "GET / HTTP/2.0\r\nHost: a\r\n\r\n" + end},
		{"bad request line", "GET /\r\nHost: a\r\n\r\n" + end},
		{"head over 1 MiB", "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("x", 1<<20+8192) + "\r\n\r\n" + end},
		{"aborted answer", "GET /abort HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"panic", "GET /panic HTTP/1.1\r\nHost: a\r\n\r\n" + end},
		{"hijack with bytes read ahead", "GET /hijack HTTP/1.1\r\nHost: a\r\n\r\nrest"},
	}
	ours := listenH1(t, newH1Server(http.HandlerFunc(h1TestHandler), nil))
	std := listenStd(t, http.HandlerFunc(h1TestHandler))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := dates.ReplaceAllString(exchangeRaw(t, ours, tc.in), "Date: -\r\n")
			want := dates.ReplaceAllString(exchangeRaw(t, std, tc.in), "Date: -\r\n")
			if got != want {
				t.Fatalf("h1Server answered\n%q\nhttp.Server\n%q", truncate(got, 2000), truncate(want, 2000))
			}
		})
	}
}

// TestH1PipelinedByteReadByTheWatch: a request that outlasts watchAfter has its connection
// read in the background; a pipelined request's first byte read there is the next request's.
func TestH1PipelinedByteReadByTheWatch(t *testing.T) {
	entered, read := make(chan struct{}, 1), make(chan int, 4)
	s := newH1Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			select {
			case n := <-read:
				if n != 1 {
					t.Errorf("the watch read %d bytes of the pipelined request", n)
				}
			case <-time.After(5 * time.Second):
				t.Error("the watch did not read the pipelined request's first byte within 5 s")
			}
		}
		io.WriteString(w, r.Method+" "+r.URL.Path)
	}), nil)
	s.watched = func(event string, n int) {
		if event == "ended" {
			read <- n
		}
	}
	c, err := net.Dial("tcp", listenH1(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first request did not reach its handler within 5 s")
	}
	// Sent while the first is in its handler: the watch reads its first byte.
	io.WriteString(c, "GET /next HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("waiting for the server to close the connection after the second answer: %v (got %q)", err, out)
	}
	if !strings.Contains(string(out), "\r\n\r\nGET /slow") || !strings.Contains(string(out), "\r\n\r\nGET /next") {
		t.Fatalf("pipelined answers: %q", out)
	}
}

// TestH1ClientCloseCancelsTheRequest: a client that goes away while its request waits upstream
// ends the request's context (net/http's background read; here, the watch), whether the
// request had no body, or a body read before the watch was due, or one still being read when
// it was due (the watch then starts at the body's end).
func TestH1ClientCloseCancelsTheRequest(t *testing.T) {
	for _, body := range []string{"none", "read before", "read after"} {
		t.Run(body, func(t *testing.T) {
			entered, due, ended := make(chan struct{}), make(chan struct{}, 1), make(chan error, 1)
			s := newH1Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				close(entered)
				select {
				case <-r.Context().Done():
					ended <- nil
				case <-time.After(10 * time.Second):
					ended <- errors.New("the request's context was not cancelled within 10 s of its client closing")
				}
			}), nil)
			s.watched = func(event string, _ int) {
				if event == "due" {
					due <- struct{}{}
				}
			}
			c, err := net.Dial("tcp", listenH1(t, s))
			if err != nil {
				t.Fatal(err)
			}
			switch body {
			case "none":
				io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n")
			case "read before":
				io.WriteString(c, "POST /wait HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")
			case "read after":
				io.WriteString(c, "POST /wait HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n")
				select {
				case <-due:
				case <-time.After(5 * time.Second):
					t.Fatal("the watch was not due within 5 s of the request")
				}
				io.WriteString(c, "abc")
			}
			select {
			case <-entered:
			case <-time.After(5 * time.Second):
				t.Fatal("the request's body was not read within 5 s")
			}
			c.Close()
			if err := <-ended; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestH1HeaderTimeout: a client that sends its head slowly (slowloris) or sits idle between
// requests is cut off at the server's timeouts.
func TestH1HeaderTimeout(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"head never finished", "GET / HTTP/1.1\r\nHost: a\r\nX-A: "},
		{"idle after an answer", "GET /small HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"nothing sent", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newH1Server(http.HandlerFunc(h1TestHandler), nil)
			s.readHeaderTimeout, s.idleTimeout = 200*time.Millisecond, 200*time.Millisecond
			c, err := net.Dial("tcp", listenH1(t, s))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.in)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Fatalf("the server did not close the connection within 5 s: %v", err)
			}
		})
	}
}

// TestH1ContinueWaitsForTheHandler: with Expect: 100-continue, the client sends its body only
// after the 100, which goes out when the handler reads the body, and not at all when it
// answers without reading it (then the connection closes, as the body may still come).
func TestH1ContinueWaitsForTheHandler(t *testing.T) {
	addr := listenH1(t, newH1Server(http.HandlerFunc(h1TestHandler), nil))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("before the body: %q, %v", line, err)
	}
	br.ReadString('\n')
	io.WriteString(c, "abc")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "abc" {
		t.Fatalf("echoed %q", b)
	}

	io.WriteString(c, "POST /refuse HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusForbidden || !resp.Close {
		t.Fatalf("refused unread: %v, %+v", err, resp)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("the connection stayed open after an unread 100-continue body: %v", err)
	}
}

// TestH1PanicEndsOnlyItsConnection: a handler's panic closes its own connection; the server
// goes on serving others.
func TestH1PanicEndsOnlyItsConnection(t *testing.T) {
	addr := listenH1(t, newH1Server(http.HandlerFunc(h1TestHandler), nil))
	if out := exchangeRaw(t, addr, "GET /panic HTTP/1.1\r\nHost: a\r\n\r\n"); out != "" {
		t.Fatalf("a panic answered %q", out)
	}
	if out := exchangeRaw(t, addr, "GET /small HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"); !strings.HasSuffix(out, "hello") {
		t.Fatalf("after a panic: %q", out)
	}
}

// TestH1CloseEndsIdleConnections: Close ends the connections kept alive between requests.
func TestH1CloseEndsIdleConnections(t *testing.T) {
	s := newH1Server(http.HandlerFunc(h1TestHandler), nil)
	c, err := net.Dial("tcp", listenH1(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /small HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	s.Close()
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("Close left an idle connection open: %v", err)
	}
}

// TestH1FramingListenerHostChecks: through the framing check (every listener of the gateway),
// a request whose Host http.ReadRequest takes out unchecked, an absolute-form one, is refused
// with two Host headers, a malformed one, an empty one or none, and the refusal is recorded;
// so is one whose lines end in bare LFs, as net/http reads them, where the check looked for
// CRLFs only and saw no head end.
func TestH1FramingListenerHostChecks(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"two", "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"},
		{"malformed", "GET http://a.example/ HTTP/1.1\r\nHost: a.example b\r\n\r\n"},
		{"none", "GET http://a.example/ HTTP/1.1\r\n\r\n"},
		{"empty", "GET http://a.example/ HTTP/1.1\r\nHost:\r\n\r\n"},
		{"none, lines ended by bare LF", "GET http://a.example/ HTTP/1.1\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var served, refused atomic.Int32
			s := newH1Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }), nil)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go s.Serve(NewFramingListener(l, func(net.Addr, string) { refused.Add(1) }))
			t.Cleanup(func() { s.Close() })
			out := exchangeRaw(t, l.Addr().String(), tc.in)
			if !strings.HasPrefix(out, "HTTP/1.1 400 ") || served.Load() != 0 || refused.Load() != 1 {
				t.Fatalf("answered %q, served %d, refusals recorded %d", out, served.Load(), refused.Load())
			}
		})
	}
}

// TestH1HijackStopsTheWatch: a handler that hijacks after the watch began reads the client's
// bytes itself, none lost to the background read.
func TestH1HijackStopsTheWatch(t *testing.T) {
	started := make(chan struct{}, 1)
	s := newH1Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Error("the watch did not start within 5 s")
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		r0 := &w.(*h1Response).c.r
		r0.mu.Lock()
		pending := r0.inRead
		r0.mu.Unlock()
		if pending {
			t.Error("the watch's background read was still pending after Hijack returned")
		}
		io.WriteString(conn, "ok\n")
		line, _ := brw.ReadString('\n')
		io.WriteString(conn, "got "+line)
	}), nil)
	s.watched = func(event string, _ int) {
		if event == "started" {
			started <- struct{}{}
		}
	}
	c, err := net.Dial("tcp", listenH1(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /up HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "ok\n" {
		t.Fatalf("%q, %v", line, err)
	}
	io.WriteString(c, "stream\n")
	if line, err := br.ReadString('\n'); err != nil || line != "got stream\n" {
		t.Fatalf("after the hijack: %q, %v", line, err)
	}
}

// FuzzH1ServerAsNetHTTP sends the same bytes to h1Server and to http.Server, each behind the
// framing check as the gateway's listeners are, and requires the same bytes back (the Date
// aside).
func FuzzH1ServerAsNetHTTP(f *testing.F) {
	for _, in := range []string{
		"GET /small HTTP/1.1\r\nHost: a\r\n\r\nGET /big HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: v\r\n\r\nHEAD /small HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /refuse HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
		"GET /trailer HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /early HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://b.example/x HTTP/1.1\r\nHost: b.example\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01c\r\n\r\n",
	} {
		f.Add([]byte(in))
	}
	listen := func(serve func(net.Listener)) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Fatal(err)
		}
		go serve(NewFramingListener(l, nil))
		return l.Addr().String()
	}
	ours := newH1Server(http.HandlerFunc(h1TestHandler), nil)
	std := &http.Server{Handler: http.HandlerFunc(h1TestHandler), ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}
	a := listen(func(l net.Listener) { ours.Serve(l) })
	b := listen(func(l net.Listener) { std.Serve(l) })
	f.Cleanup(func() { ours.Close(); std.Close() })
	f.Fuzz(func(t *testing.T, in []byte) {
		got := dates.ReplaceAllString(exchangeRaw(t, a, string(in)), "Date: -\r\n")
		want := dates.ReplaceAllString(exchangeRaw(t, b, string(in)), "Date: -\r\n")
		if got != want {
			t.Fatalf("h1Server answered\n%q\nhttp.Server\n%q", truncate(got, 2000), truncate(want, 2000))
		}
	})
}
