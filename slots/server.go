package slots

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Timeouts bound how long a connection is held without progress. None may be zero: a zero
// would hold a connection for as long as its client likes.
type Timeouts struct {
	// Header bounds a TLS handshake, and a request's line and headers (from its first byte).
	Header time.Duration
	// Body bounds the whole body of a call that is not an upload, from the call's start: a
	// JSON body or a form comes whole within it, or the call ends with ErrSlowBody.
	Body time.Duration
	// Stall bounds each read of an upload's body and each write of an answer: a transfer
	// that moves no byte for so long is cut off, however long it has flowed before. A live
	// stream that has nothing to send is not stalled; a client that stops reading it is.
	Stall time.Duration
	// Idle bounds how long a kept-alive connection waits for its next request.
	Idle time.Duration
}

// ServerConfig is what a Server needs.
type ServerConfig struct {
	Handler http.Handler
	// TLS serves over TLS (HTTP/2 too when its NextProtos offer h2); nil serves plain HTTP.
	TLS      *tls.Config
	Conns    Conns
	Timeouts Timeouts
	// Setting is where the listener is configured ("api"), named in refusals and errors:
	// api.connections.per_address, api.timeouts.body.
	Setting string
	// Refuse answers a request that came on a refused connection with status 429 and msg, in
	// the handler's own form (Retry-After and Connection: close are set); nil answers text.
	Refuse func(w http.ResponseWriter, r *http.Request, msg string)
}

// Server is an http.Server whose connections and requests are bounded: connections per
// address and in all (Conns, before anyone is authenticated), each phase of a connection in
// time (Timeouts: handshake and headers, a body, a stalled transfer, an idle connection). What
// one identity holds at once after authentication is the handler's to bound, with a Set.
type Server struct {
	cfg  ServerConfig
	ln   *Listener
	http *http.Server
}

// NewServer returns a server of cfg on ln; Serve starts it. Callers validate cfg (the config
// package does for the node's listeners).
func NewServer(ln net.Listener, cfg ServerConfig) *Server {
	s := &Server{cfg: cfg, ln: Limit(ln, cfg.Conns, cfg.Setting+".connections")}
	s.http = &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: cfg.Timeouts.Header,
		IdleTimeout: cfg.Timeouts.Idle, ConnContext: connContext}
	return s
}

// Serve serves until Close, and returns http.ErrServerClosed then.
func (s *Server) Serve() error {
	var ln net.Listener = s.ln
	if s.cfg.TLS != nil {
		// Inside the bounds, so a handshake is made only on a connection they let through or
		// one whose refusal is answered.
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	return s.http.Serve(ln)
}

// Close closes the listener and every connection.
func (s *Server) Close() error { return s.http.Close() }

// Connections returns how many connections addr (an Address) holds.
func (s *Server) Connections(addr string) int { return s.ln.Held(addr) }

// serveHTTP answers a refused connection's requests with its refusal, and serves every other
// request under the timeouts: its body (when it has one) must come whole within Body unless
// the handler calls Upload or Interactive, and every write of its answer must be taken within
// Stall.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if why := refused(r.Context()); why != "" {
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Connection", "close")
		if s.cfg.Refuse != nil {
			s.cfg.Refuse(w, r, why)
			return
		}
		http.Error(w, why, http.StatusTooManyRequests)
		return
	}
	g := &guard{rc: http.NewResponseController(w), t: s.cfg.Timeouts, setting: s.cfg.Setting}
	// A request without a body gets no read deadline: the server is already reading the
	// connection in the background, to see the client go, and a deadline would end the call.
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		g.body = &body{ReadCloser: r.Body, g: g}
		g.rc.SetReadDeadline(time.Now().Add(g.t.Body))
		r.Body = g.body
	}
	s.cfg.Handler.ServeHTTP(&writer{ResponseWriter: w, g: g}, r)
	g.finish()
}

// ErrSlowBody is what a request body's Read returns, wrapped in a *SlowBody, when the body did
// not come in time.
var ErrSlowBody = errors.New("request body too slow")

// SlowBody says which timeout ended a request body, naming its setting.
type SlowBody struct {
	// Upload: the body was an upload that stalled (Timeouts.Stall); else a call's body that
	// did not come whole (Timeouts.Body).
	Upload  bool
	After   time.Duration
	Setting string
}

func (e *SlowBody) Error() string {
	if e.Upload {
		return fmt.Sprintf("the upload stalled: no byte came for %s (%s.timeouts.stall)", e.After, e.Setting)
	}
	return fmt.Sprintf("the request body did not come whole within %s (%s.timeouts.body)", e.After, e.Setting)
}

func (e *SlowBody) Unwrap() error { return ErrSlowBody }

// Upload lets r's body (an upload) take as long as it flows: each read must bring a byte
// within Timeouts.Stall, rather than the whole body coming within Timeouts.Body. Call it before
// anything reads the body; a request a Server did not serve is left as it is.
func Upload(r *http.Request) { setMode(r, flowing) }

// Interactive lets r's body (what a terminal's user types) wait without end: only for calls
// that hold a slot of their identity's bound for their whole life, and end with what they
// serve. Call it before anything reads the body.
func Interactive(r *http.Request) { setMode(r, open) }

func setMode(r *http.Request, m mode) {
	if b, ok := r.Body.(*body); ok {
		b.g.mu.Lock()
		defer b.g.mu.Unlock()
		b.mode = m
		if m != whole && !b.g.done {
			b.g.rc.SetReadDeadline(time.Time{})
		}
	}
}

// mode is how long a request body may take.
type mode int

const (
	whole   mode = iota // all of it within Timeouts.Body from the call's start
	flowing             // each read within Timeouts.Stall
	open                // no bound
)

// guard holds one request's deadlines. After the handler returns (done), nothing touches its
// ResponseController: an HTTP/2 stream's is gone then, and a goroutine the handler left (one
// still copying a body) must not reach it.
type guard struct {
	rc      *http.ResponseController
	t       Timeouts
	setting string
	body    *body // nil when the request has none

	mu   sync.Mutex
	done bool
}

// deadline runs set with the controller while the handler runs.
func (g *guard) deadline(set func(*http.ResponseController)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		set(g.rc)
	}
}

// finish bounds what the server does after the handler: before it sends what it still holds
// of the answer, it reads up to 256 KiB of a body left unread, so the connection can serve
// another request (within Body; not at all when the body already came too slowly), and then
// the answer must be taken within Stall.
func (g *guard) finish() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	send := time.Now()
	if b := g.body; b != nil && !b.eof {
		// Never after the body's end: the server reads the connection in the background
		// then, and a deadline would end that read.
		if !b.slow {
			send = send.Add(g.t.Body)
		}
		g.rc.SetReadDeadline(send)
	}
	g.rc.SetWriteDeadline(send.Add(g.t.Stall))
}

// body is a request body read under its mode's deadline.
type body struct {
	io.ReadCloser
	g    *guard
	mode mode // under g.mu
	eof  bool // under g.mu: the body was read to its end
	slow bool // under g.mu: a read of it timed out
}

func (b *body) Read(p []byte) (int, error) {
	b.g.mu.Lock()
	m := b.mode
	if m == flowing && !b.g.done && !b.eof {
		b.g.rc.SetReadDeadline(time.Now().Add(b.g.t.Stall))
	}
	b.g.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	switch {
	case err == io.EOF:
		// The server clears an HTTP/1 connection's read deadline here itself, to read it in
		// the background; an HTTP/2 stream's would still fire.
		b.eof = true
		if !b.g.done {
			b.g.rc.SetReadDeadline(time.Time{})
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.slow = true
		if m == flowing {
			return n, &SlowBody{Upload: true, After: b.g.t.Stall, Setting: b.g.setting}
		}
		return n, &SlowBody{After: b.g.t.Body, Setting: b.g.setting}
	case m == flowing && !b.g.done:
		// An HTTP/2 stream's deadline fires whether or not a read waits: none while the
		// handler works between reads.
		b.g.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// writer is the handler's ResponseWriter: each write (and flush) of the answer must be taken
// within Stall. The deadline is cleared between writes, so a stream with nothing to send (a
// long poll, a quiet command) is not cut off.
type writer struct {
	http.ResponseWriter
	g *guard
}

func (w *writer) arm() {
	w.g.deadline(func(rc *http.ResponseController) { rc.SetWriteDeadline(time.Now().Add(w.g.t.Stall)) })
}

func (w *writer) disarm() {
	w.g.deadline(func(rc *http.ResponseController) { rc.SetWriteDeadline(time.Time{}) })
}

func (w *writer) Write(p []byte) (int, error) {
	w.arm()
	defer w.disarm()
	return w.ResponseWriter.Write(p)
}

// WriteHeader may write (an informational status goes out at once).
func (w *writer) WriteHeader(status int) {
	w.arm()
	defer w.disarm()
	w.ResponseWriter.WriteHeader(status)
}

func (w *writer) Flush() { w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *writer) FlushError() error {
	w.arm()
	defer w.disarm()
	return w.g.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer for what writer does not
// bound (full duplex, hijacking).
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
