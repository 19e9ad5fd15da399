package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/wait"
)

// The holes the review of h1Server found (#34), each attacked on the real gateway.

// A sandbox that pipelines two requests and closes its session while the first waits upstream:
// the second, already read into the connection's buffer, must not go upstream (it runs with
// the connection's context cancelled, as under net/http's server, and is recorded refused).
func TestH1PipelinedBehindACloseGoesNowhere(t *testing.T) {
	h := newHarness(t)
	started := make(chan struct{})
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/slow" {
			io.WriteString(w, "path="+r.URL.Path)
			return
		}
		close(started)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	s := h.intercept(t, "api.example.test:443")
	io.WriteString(s, "GET /v1/slow HTTP/1.1\r\nHost: api.example.test\r\n\r\nGET /v1/next HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream did not get /v1/slow within 10 s")
	}
	s.Close()
	wait.Until(5*time.Second, "a record of /v1/next", func() bool { return len(reviewRecordsFor(h.sink, "/v1/next")) > 0 })
	for _, rec := range reviewRecordsFor(h.sink, "/v1/next") {
		if rec.Decision == "allow" || rec.Status == http.StatusOK {
			t.Errorf("/v1/next, pipelined behind a request whose client closed, was served: %s %d", rec.Decision, rec.Status)
		}
	}
	for _, u := range h.received() {
		if strings.Contains(u, "/v1/next") {
			t.Errorf("the upstream got %q after the sandbox closed its session", u)
		}
	}
}

// Up to four CR or LF after a POST's body are passed over, as net/http's server does.
func TestH1CRLFAfterAPostIsPassedOver(t *testing.T) {
	for _, sep := range []string{"\r\n", "\n", "\r\n\r\n"} {
		h := newHarness(t)
		addr := serveHarness(t, h)
		c := dialTimed(t, addr)
		io.WriteString(c, "POST http://plain.example.test/v1/a HTTP/1.1\r\nHost: plain.example.test\r\nContent-Length: 3\r\n\r\nabc"+sep+
			"GET http://plain.example.test/v1/b HTTP/1.1\r\nHost: plain.example.test\r\nConnection: close\r\n\r\n")
		br := bufio.NewReader(c)
		for _, want := range []string{"/v1/a", "/v1/b"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%q after the POST: reading the answer to %s: %v", sep, want, err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
				t.Errorf("%q after the POST: %s answered %d %q", sep, want, resp.StatusCode, b)
			}
		}
		c.Close()
	}
}

// A CONNECT that declares a body is refused: the framing check does not frame a CONNECT's body,
// and one that net/http reads would hide the requests behind it from the check (here a request
// with both lengths, which must never reach an upstream).
func TestFramingRefusesAConnectWithABody(t *testing.T) {
	real := "POST http://plain.example.test/v1/smuggle HTTP/1.1\r\nHost: plain.example.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	fake := "GET http://plain.example.test/v1/fake HTTP/1.1\r\nHost: plain.example.test\r\nContent-Length: " + strconv.Itoa(len(real)) + "\r\n\r\n"
	for name, connect := range map[string]string{
		"content-length": "CONNECT denied.example.test:443 HTTP/1.1\r\nHost: denied.example.test:443\r\nContent-Length: " + strconv.Itoa(len(fake)) + "\r\n\r\n" + fake,
		"chunked":        "CONNECT denied.example.test:443 HTTP/1.1\r\nHost: denied.example.test:443\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n", len(fake)) + fake + "\r\n0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			addr := serveHarness(t, h)
			c := dialTimed(t, addr)
			io.WriteString(c, connect+real)
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(resp.Header.Get("X-Airlock-Reason"), "CONNECT request with a body") {
				t.Errorf("a CONNECT with a body answered %d (%s), want 400 naming it", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
			}
			io.Copy(io.Discard, c)
			for _, u := range h.received() {
				if strings.Contains(u, "smuggle") || strings.Contains(u, "fake") {
					t.Errorf("the upstream got %q behind a CONNECT with a body", u)
				}
			}
		})
	}
}

// newlineRand is a tls.Config.Rand whose every byte is LF: the ClientHello's random and session
// ID then hold "\n\n", which ends a request head for the framing check.
type newlineRand struct{}

func (newlineRand) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '\n'
	}
	return len(p), nil
}

// earlyConn writes the CONNECT with the first thing the TLS client writes, its ClientHello, in
// one write (a client that does not wait for the 200), and reads the CONNECT's answer first.
type earlyConn struct {
	net.Conn
	connect []byte
	br      *bufio.Reader
	got     bool
}

func (c *earlyConn) Write(p []byte) (int, error) {
	if c.connect != nil {
		b := append(c.connect, p...)
		c.connect = nil
		_, err := c.Conn.Write(b)
		return len(p), err
	}
	return c.Conn.Write(p)
}

func (c *earlyConn) Read(p []byte) (int, error) {
	if !c.got {
		resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("CONNECT answered %d (%s)", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
		}
		c.got = true
	}
	return c.br.Read(p)
}

// The bytes a client sends behind its CONNECT before the answer are the tunnel's once it opens:
// a ClientHello that holds what would end a request head is not judged as one.
func TestFramingLeavesEarlyTunnelBytesAlone(t *testing.T) {
	h := newHarness(t)
	addr := serveHarness(t, h)
	raw := dialTimed(t, addr)
	ec := &earlyConn{Conn: raw, connect: []byte("CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n"), br: bufio.NewReader(raw)}
	tc := tls.Client(ec, &tls.Config{ServerName: "api.example.test", RootCAs: h.ca.Pool(), NextProtos: []string{"http/1.1"}, Rand: newlineRand{}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("a CONNECT with its ClientHello sent along: %v", err)
	}
	io.WriteString(tc, "GET /v1/x HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a request in the tunnel answered %d", resp.StatusCode)
	}
}

// Behind a CONNECT that is refused, what the client sent along is checked as requests before
// any of it is read as one: a request with both lengths there is refused, and reaches no one.
func TestFramingChecksWhatFollowsARefusedConnect(t *testing.T) {
	h := newHarness(t)
	addr := serveHarness(t, h)
	c := dialTimed(t, addr)
	io.WriteString(c, "CONNECT denied.example.test:443 HTTP/1.1\r\nHost: denied.example.test:443\r\n\r\n"+
		"POST http://plain.example.test/v1/smuggle HTTP/1.1\r\nHost: plain.example.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	all, _ := io.ReadAll(c)
	br := bufio.NewReader(bytes.NewReader(all))
	first, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("the CONNECT's answer: %v", err)
	}
	io.Copy(io.Discard, first.Body)
	if first.StatusCode == http.StatusOK {
		t.Fatalf("a CONNECT to a host no scope allows was answered 200")
	}
	second, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the request behind the refused CONNECT: %v (all: %q)", err, all)
	}
	if second.StatusCode != http.StatusBadRequest || !strings.Contains(second.Header.Get("X-Airlock-Reason"), "both Content-Length and Transfer-Encoding") {
		t.Errorf("the request with both lengths behind a refused CONNECT answered %d (%s)", second.StatusCode, second.Header.Get("X-Airlock-Reason"))
	}
	for _, u := range h.received() {
		if strings.Contains(u, "smuggle") {
			t.Errorf("the upstream got %q", u)
		}
	}
}

// A host no client library would send, in an absolute-form target: net/http's server handed
// it to the gateway, which refuses it and records the refusal naming the host (what a reviewer
// sees on the review page); h1Server must not answer it with an unrecorded 400 of its own.
func TestH1HostileAbsoluteHostIsRefusedAndRecorded(t *testing.T) {
	h := newHarness(t)
	addr := serveHarness(t, h)
	c := dialTimed(t, addr)
	io.WriteString(c, "GET http://<script>alert(5)</script>.example/ HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("a hostile host was answered 200")
	}
	rec, ok := h.sink.await(func(r audit.Record) bool { return strings.Contains(r.Reason, "<script>") })
	if !ok {
		t.Fatalf("no record names the refused host (answered %d %s)", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
	}
	if rec.Decision == "allow" {
		t.Errorf("the hostile host was recorded allowed: %+v", rec)
	}
}
