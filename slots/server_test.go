package slots

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
)

// testServer is a Server on loopback whose handler is mux; tests dial it from 127.0.0.x, each
// address its own.
type testServer struct {
	tb   testing.TB
	srv  *Server
	ln   *Listener
	t    Timeouts
	mux  *http.ServeMux
	addr string
	tls  *tls.Config // the client's, when the server serves TLS
}

// serveTest serves on 127.0.0.1 with c and short timeouts (tune changes them); GET / answers
// 200 "ok".
func serveTest(tb testing.TB, c Conns, tune func(*Timeouts)) *testServer {
	tb.Helper()
	return serve(tb, c, tune, nil)
}

func serve(tb testing.TB, c Conns, tune func(*Timeouts), cert *tls.Certificate) *testServer {
	tb.Helper()
	t := Timeouts{Header: 3 * time.Second, Body: 300 * time.Millisecond, Stall: 300 * time.Millisecond, Idle: 300 * time.Millisecond}
	if tune != nil {
		tune(&t)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &testServer{tb: tb, t: t, mux: http.NewServeMux(), addr: ln.Addr().String()}
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	cfg := ServerConfig{Handler: s.mux, Conns: c, Timeouts: t, Setting: "test"}
	if cert != nil {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2", "http/1.1"}}
		roots := x509.NewCertPool()
		roots.AddCert(cert.Leaf)
		s.tls = &tls.Config{RootCAs: roots, ServerName: "test"}
	}
	s.srv = NewServer(ln, cfg)
	s.ln = s.srv.ln
	go s.srv.Serve()
	tb.Cleanup(func() { s.srv.Close() })
	return s
}

// dial connects from the loopback address from; the connection is closed when the test ends.
func (s *testServer) dial(from string) net.Conn {
	s.tb.Helper()
	return s.dialWith(net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}})
}

func (s *testServer) dialWith(d net.Dialer) net.Conn {
	s.tb.Helper()
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		s.tb.Fatal(err)
	}
	s.tb.Cleanup(func() { c.Close() })
	return c
}

// post sends the head of a POST with a body of size bytes, and first of them.
func (s *testServer) post(c net.Conn, path string, size int, first string) {
	s.tb.Helper()
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s", path, size, first); err != nil {
		s.tb.Fatal(err)
	}
}

// answer reads the answer on c within 10 s: its status and body.
func (s *testServer) answer(c net.Conn) (int, string) {
	s.tb.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		s.tb.Fatalf("waiting 10s for an answer on %s: %v", c.LocalAddr(), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// closed asserts that the server closes c within 10 s, with nothing more to read.
func (s *testServer) closed(c net.Conn, what string) {
	s.tb.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); err != nil || len(b) > 0 {
		s.tb.Fatalf("waiting 10s for the server to close %s: read %q, %v", what, b, err)
	}
}

// readBody answers 200 with the size of the body it read, or 408 with the read's error; each
// error is sent on errs too.
func readBody(errs chan<- error, mark func(*http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if mark != nil {
			mark(r)
		}
		b, err := io.ReadAll(r.Body)
		errs <- err
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprintf(w, "%d bytes", len(b))
	}
}

// got waits 10 s for the handler's error.
func got(tb testing.TB, errs <-chan error, what string) error {
	tb.Helper()
	select {
	case err := <-errs:
		return err
	case <-time.After(10 * time.Second):
		tb.Fatalf("waited 10s for %s", what)
		return nil
	}
}

// A call's body must come whole within the body timeout: a client that sends one byte of a
// thousand is cut off, told which setting, and its connection closed.
func TestCallBodyComesWholeInTime(t *testing.T) {
	s := serveTest(t, Conns{Max: 8, PerAddress: 4}, nil)
	errs := make(chan error, 1)
	s.mux.HandleFunc("POST /call", readBody(errs, nil))
	c := s.dial("127.0.0.1")
	s.post(c, "/call", 1000, "{")
	err := got(t, errs, "the slow body to be cut off")
	var slow *SlowBody
	if !errors.As(err, &slow) || !errors.Is(err, ErrSlowBody) || slow.Upload {
		t.Fatalf("reading a body that never comes: %v; want a *SlowBody of a call", err)
	}
	if status, body := s.answer(c); status != http.StatusRequestTimeout || !strings.Contains(body, "did not come whole within 300ms (test.timeouts.body)") {
		t.Fatalf("the answer: %d %q", status, body)
	}
	s.closed(c, "the slow body's connection")
}

// A body the handler never reads (a refusal before authentication) holds its connection no
// longer than the body timeout: the server does not wait for the rest to reuse it.
func TestUnreadBodyIsNotWaitedFor(t *testing.T) {
	s := serveTest(t, Conns{Max: 8, PerAddress: 4}, nil)
	s.mux.HandleFunc("POST /refuse", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "who are you", http.StatusUnauthorized) })
	c := s.dial("127.0.0.1")
	s.post(c, "/refuse", 1000, "{")
	if status, _ := s.answer(c); status != http.StatusUnauthorized {
		t.Fatalf("the refusal: %d", status)
	}
	s.closed(c, "the unread slow body's connection")
	wait.For(t, 5*time.Second, "the closed connection to free its slot", func() bool { return s.srv.Connections("127.0.0.1") == 0 })
}

// An upload takes as long as it keeps moving, past the body timeout; one that stops moving for
// the stall timeout is cut off, told which setting.
func TestUploadFlowsWhileItMoves(t *testing.T) {
	s := serveTest(t, Conns{Max: 8, PerAddress: 4}, func(tm *Timeouts) { tm.Body, tm.Stall = 200*time.Millisecond, 3*time.Second })
	callErrs, upErrs := make(chan error, 1), make(chan error, 2)
	s.mux.HandleFunc("POST /call", readBody(callErrs, nil))
	s.mux.HandleFunc("POST /upload", readBody(upErrs, Upload))
	up, ref := s.dial("127.0.0.1"), s.dial("127.0.0.1")
	s.post(up, "/upload", 4, "a")
	s.post(ref, "/call", 4, "a") // started with the upload: when it is cut off, the body timeout has passed for both
	if err := got(t, callErrs, "the call's body to be cut off"); !errors.Is(err, ErrSlowBody) {
		t.Fatalf("the call's slow body: %v", err)
	}
	io.WriteString(up, "bcd")
	if status, body := s.answer(up); status != http.StatusOK || body != "4 bytes" {
		t.Fatalf("an upload that moved past the body timeout: %d %q; want it whole", status, body)
	}
	<-upErrs
	stalled := s.dial("127.0.0.1")
	s.post(stalled, "/upload", 4, "a")
	err := got(t, upErrs, "the stalled upload to be cut off")
	var slow *SlowBody
	if !errors.As(err, &slow) || !slow.Upload || !strings.Contains(err.Error(), "no byte came for 3s (test.timeouts.stall)") {
		t.Fatalf("an upload that stopped: %v; want a stalled *SlowBody", err)
	}
}

// What a terminal's user types may wait without end: an interactive body outlives the stall
// timeout (here: an upload started with it is cut off first) and is read whole.
func TestInteractiveBodyWaits(t *testing.T) {
	// The body timeout is shorter: a body that were not interactive would be cut off first.
	s := serveTest(t, Conns{Max: 8, PerAddress: 4}, func(tm *Timeouts) { tm.Body, tm.Stall = 100*time.Millisecond, 500*time.Millisecond })
	upErrs, ttyErrs := make(chan error, 1), make(chan error, 1)
	s.mux.HandleFunc("POST /upload", readBody(upErrs, Upload))
	s.mux.HandleFunc("POST /tty", readBody(ttyErrs, Interactive))
	tty, ref := s.dial("127.0.0.1"), s.dial("127.0.0.1")
	s.post(tty, "/tty", 2, "a")
	s.post(ref, "/upload", 2, "a")
	if err := got(t, upErrs, "the stalled upload to be cut off"); !errors.Is(err, ErrSlowBody) {
		t.Fatalf("the stalled upload: %v", err)
	}
	io.WriteString(tty, "b")
	if status, body := s.answer(tty); status != http.StatusOK || body != "2 bytes" {
		t.Fatalf("an interactive body past the stall timeout: %d %q; want it whole", status, body)
	}
}

// A client that stops reading an answer is cut off after the stall timeout: the handler's write
// fails, and the connection and its slot are given back.
func TestSlowReaderIsCutOff(t *testing.T) {
	s := serveTest(t, Conns{Max: 8, PerAddress: 4}, nil)
	errs := make(chan error, 1)
	s.mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 32<<10)
		for range 8 << 10 { // 256 MiB: more than any socket buffer takes
			if _, err := w.Write(chunk); err != nil {
				errs <- err
				return
			}
		}
		errs <- errors.New("256 MiB were written to a client that reads nothing")
	})
	// A small receive buffer, so the server's writes stop early.
	c := s.dialWith(net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}})
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: test\r\n\r\n")
	if err := got(t, errs, "the write to a client that reads nothing to fail"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("writing to a client that reads nothing: %v; want the stall deadline", err)
	}
	wait.For(t, 10*time.Second, "the slow reader's connection to be closed", func() bool { return s.srv.Connections("127.0.0.1") == 0 })
}

// A stream with nothing to send for longer than the stall timeout is not stalled, over HTTP/1.1
// and HTTP/2 (whose deadlines fire whether or not a write waits), and neither the body timeout
// nor the server's background read of the connection ends a call that runs past them, with a
// body or without.
func TestQuietStreamIsNotCutOff(t *testing.T) {
	cert := testCert(t)
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		method string
	}{{"HTTP/1.1 GET", nil, "GET"}, {"HTTP/1.1 POST", nil, "POST"}, {"HTTP/2 GET", cert, "GET"}, {"HTTP/2 POST", cert, "POST"}} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, Conns{Max: 8, PerAddress: 4}, nil, tc.cert)
			speak := make(chan struct{})
			stalled := make(chan error, 1)
			s.mux.HandleFunc("POST /upload", readBody(stalled, Upload))
			s.mux.HandleFunc("/quiet", func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					io.ReadAll(r.Body)
				}
				io.WriteString(w, "a")
				http.NewResponseController(w).Flush()
				<-speak
				if err := r.Context().Err(); err != nil {
					io.WriteString(w, "the call's context ended: "+err.Error())
					return
				}
				io.WriteString(w, "b")
			})
			client, base := s.client(tc.cert != nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var body io.Reader
			if tc.method == "POST" {
				body = strings.NewReader("x")
			}
			req, _ := http.NewRequestWithContext(ctx, tc.method, base+"/quiet", body)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if (resp.ProtoMajor == 2) != (tc.cert != nil) {
				t.Fatalf("served over %s", resp.Proto)
			}
			if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			// An upload that stalls from now is cut off once the stall timeout has passed (and
			// the body timeout, which is no longer): then the quiet stream speaks again.
			pr, pw := io.Pipe()
			defer pw.Close()
			up, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/upload", pr)
			up.ContentLength = 2
			go func() {
				if resp, err := client.Do(up); err == nil {
					resp.Body.Close()
				}
			}()
			pw.Write([]byte("a"))
			if err := got(t, stalled, "the reference upload to stall"); !errors.Is(err, ErrSlowBody) {
				t.Fatalf("the reference upload: %v", err)
			}
			close(speak)
			rest, err := io.ReadAll(resp.Body)
			if err != nil || string(rest) != "b" {
				t.Fatalf("the stream after a quiet spell longer than the stall timeout: %q, %v; want \"b\"", rest, err)
			}
		})
	}
}

// client is an HTTP client of s (HTTP/2 over TLS when secure) and the base URL it calls.
func (s *testServer) client(secure bool) (*http.Client, string) {
	s.tb.Helper()
	tr := &http.Transport{TLSClientConfig: s.tls, ForceAttemptHTTP2: secure}
	s.tb.Cleanup(tr.CloseIdleConnections)
	if secure {
		return &http.Client{Transport: tr}, "https://" + s.addr
	}
	return &http.Client{Transport: tr}, "http://" + s.addr
}

// A kept-alive connection that sends no next request is closed after the idle timeout, and one
// that never finishes its headers after the header timeout; both give their slots back.
func TestIdleAndSlowHeadersAreClosed(t *testing.T) {
	s := serveTest(t, Conns{Max: 8, PerAddress: 4}, func(tm *Timeouts) { tm.Header = 300 * time.Millisecond })
	idle := s.dial("127.0.0.1")
	s.served(idle)
	headers := s.dial("127.0.0.1")
	io.WriteString(headers, "GET / HTTP/1.1\r\nHost: test\r\n")
	silent := s.dial("127.0.0.1")
	s.closed(idle, "a kept-alive connection with no next request")
	s.closed(headers, "a connection whose headers never end")
	s.closed(silent, "a connection that sends nothing")
	s.waitHeld("127.0.0.1", 0)
}

// testCert is a self-signed certificate for "test".
func testCert(tb testing.TB) *tls.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"test"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}
