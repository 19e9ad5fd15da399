package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1Server serves HTTP/1.x on its connections, one goroutine each, where http.Server was: the
// sandbox's listener, an intercepted session that did not negotiate h2, a redirected plain
// connection. Every byte of framing is still read and written by net/http: http.ReadRequest
// parses each request (request line, headers through textproto, the body's framing), the
// body is net/http's own reader, and the answer's head is written by Header.WriteSubset, as
// net/http's server writes it. What it leaves out is net/http's per-request background read,
// a goroutine that watches for the client's close while the handler runs: here that watch
// starts only once a request has been in the handler for watchAfter (an answer in time never
// needs it), so a request whose client goes away still has its context cancelled.
//
// It keeps what the gateway relies on of net/http's server (server.go's conn.serve and
// response, which this follows step by step): exactly one Host header and a valid one, valid
// header names and values, a bound on the request head (431), ReadHeaderTimeout and
// IdleTimeout, Expect: 100-continue (and 417 for any other expectation), Connection: close
// and HTTP/1.0 keep-alive, a request body left unread drained up to 256 KiB or the
// connection closed, a body that fails midway closing the connection, Hijack, a panic ending
// only its own connection (http.ErrAbortHandler silently), the answer's Content-Length or
// chunking, Date and Content-Type as net/http adds them, trailers, HEAD and bodiless statuses,
// OPTIONS *, and Close closing every connection that was not hijacked.
type h1Server struct {
	handler           http.Handler
	readHeaderTimeout time.Duration
	idleTimeout       time.Duration
	log               *slog.Logger // panics; nil discards them
	// watched, when set (by tests), is told when a watch is due while the body is still being
	// read ("due"), when its background read starts ("started"), and when that ends ("ended"),
	// with the byte it read (n 1) or none.
	watched func(event string, n int)

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*h1SrvConn]struct{}
}

// watchAfter is how long a request runs in its handler before its connection is watched for
// the client's close.
const watchAfter = 5 * time.Millisecond

// maxHeaderBytes is http.DefaultMaxHeaderBytes, the bound http.Server applied (the framing
// check's, 64 KiB, is smaller and comes first); like net/http, 4096 bytes more are let in for
// the bufio.Reader's buffer.
const maxHeaderBytes = http.DefaultMaxHeaderBytes + 4096

// maxPostHandlerReadBytes is how much of a request body left unread is drained to keep the
// connection (net/http's own figure).
const maxPostHandlerReadBytes = 256 << 10

// bufferBeforeChunking is how much of an answer is held before its head is written: an answer
// that fits and is complete gets a Content-Length (net/http's figure).
const bufferBeforeChunking = 2048

// rstAvoidanceDelay is how long a connection is held, its write side closed, after answering a
// request whose body it did not read, so the answer is not lost to a reset (net/http's figure).
const rstAvoidanceDelay = 500 * time.Millisecond

func newH1Server(h http.Handler, log *slog.Logger) *h1Server {
	return &h1Server{handler: h, readHeaderTimeout: 30 * time.Second, idleTimeout: 90 * time.Second, log: log,
		listeners: map[net.Listener]struct{}{}, conns: map[*h1SrvConn]struct{}{}}
}

// Serve accepts connections on l and serves each until Close, which it returns
// http.ErrServerClosed after.
func (s *h1Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return http.ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return http.ErrServerClosed
			}
			if retryAccept(err) {
				// As http.Server does: back off while the process is out of descriptors.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		go s.ServeConn(c)
	}
}

func retryAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

func (s *h1Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close closes the listeners and every connection not hijacked, idle or not.
func (s *h1Server) Close() error {
	s.mu.Lock()
	s.closed = true
	ls, cs := s.listeners, s.conns
	s.listeners, s.conns = map[net.Listener]struct{}{}, map[*h1SrvConn]struct{}{}
	s.mu.Unlock()
	var err error
	for l := range ls {
		if e := l.Close(); e != nil && err == nil {
			err = e
		}
	}
	for c := range cs {
		c.rwc.Close()
	}
	return err
}

func (s *h1Server) track(c *h1SrvConn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closed {
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// h1SrvConn is one connection's state (net/http's conn).
type h1SrvConn struct {
	srv    *h1Server
	rwc    net.Conn
	remote string
	tls    *tls.ConnectionState
	r      h1Reader
	br     *bufio.Reader
	bw     *bufio.Writer
	werr   error // the first write error: the connection is not reused after it
	// lastMethod is the method of the request served last: after a POST, up to four CR or LF
	// before the next request are passed over, as net/http's server does (RFC 9112 2.2).
	lastMethod string

	mu       sync.Mutex // hijacked, and the watch
	hijacked bool
	watch    *time.Timer
	cur      *h1Response // the request in its handler, for the watch
}

var (
	h1Readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	h1Writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
	h1Bodies  = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufferBeforeChunking) }}
)

// ServeConn serves HTTP/1.x on c until it is closed or hijacked.
func (s *h1Server) ServeConn(rwc net.Conn) {
	c := &h1SrvConn{srv: s, rwc: rwc}
	if ra := rwc.RemoteAddr(); ra != nil {
		c.remote = ra.String()
	}
	if tc, ok := tlsOf(rwc); ok {
		st := tc.ConnectionState()
		c.tls = &st
	}
	if !s.track(c, true) {
		rwc.Close()
		return
	}
	c.r.c = c
	c.r.cond = sync.NewCond(&c.r.mu)
	c.br = h1Readers.Get().(*bufio.Reader)
	c.br.Reset(&c.r)
	c.bw = h1Writers.Get().(*bufio.Writer)
	c.bw.Reset(connErrorWriter{c})
	// Every request's context derives from the connection's, which any failed read of the
	// connection cancels (net/http's handleReadError): once the client is gone, what it had
	// pipelined behind the request it left runs cancelled, and nothing of it goes upstream.
	ctx, cancelConn := context.WithCancel(context.WithValue(context.Background(), http.LocalAddrContextKey, rwc.LocalAddr()))
	defer cancelConn()
	c.r.connCancel = cancelConn
	var inFlight *h1Response
	defer func() {
		if err := recover(); err != nil && err != http.ErrAbortHandler && s.log != nil {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			s.log.Debug("panic serving a connection", "remote", c.remote, "err", err, "stack", string(buf))
		}
		if inFlight != nil {
			inFlight.cancel()
			inFlight.disableContinue()
		}
		if !c.isHijacked() {
			if inFlight != nil {
				c.endWatch(inFlight)
				inFlight.body.Close()
			}
			c.close()
		}
		s.track(c, false)
	}()
	if d := s.readHeaderTimeout; d > 0 {
		rwc.SetReadDeadline(time.Now().Add(d))
	}
	for {
		w, err := c.readRequest(ctx)
		if err != nil {
			const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
			var se h1StatusError
			switch {
			case c.r.remain <= 0:
				const publicErr = "431 Request Header Fields Too Large"
				io.WriteString(c.rwc, "HTTP/1.1 "+publicErr+errorHeaders+publicErr)
				c.closeWriteAndWait()
			case strings.HasPrefix(err.Error(), "unsupported transfer encoding"):
				code := http.StatusNotImplemented
				fmt.Fprintf(c.rwc, "HTTP/1.1 %d %s%sUnsupported transfer encoding", code, http.StatusText(code), errorHeaders)
			case isCommonNetReadError(err):
			case errors.As(err, &se):
				fmt.Fprintf(c.rwc, "HTTP/1.1 %d %s: %s%s%d %s: %s", se.code, http.StatusText(se.code), se.text, errorHeaders,
					se.code, http.StatusText(se.code), se.text)
			default:
				const publicErr = "400 Bad Request"
				io.WriteString(c.rwc, "HTTP/1.1 "+publicErr+errorHeaders+publicErr)
			}
			return
		}
		req := w.req
		if hasToken(req.Header.Get("Expect"), "100-continue") {
			if req.ProtoAtLeast(1, 1) && req.ContentLength != 0 {
				w.body.expect = true
				w.canContinue.Store(true)
			}
		} else if req.Header.Get("Expect") != "" {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusExpectationFailed)
			w.finish()
			return
		}
		inFlight = w
		c.startWatch(w)
		if req.RequestURI == "*" && req.Method == http.MethodOptions {
			optionsStar(w, req)
		} else {
			s.handler.ServeHTTP(w, req)
		}
		inFlight = nil
		w.cancel()
		if c.isHijacked() {
			return
		}
		w.finish()
		c.rwc.SetWriteDeadline(time.Time{})
		if !w.shouldReuse() {
			if w.bodyLimitHit || w.body.earlyClosed {
				c.closeWriteAndWait()
			}
			return
		}
		if d := s.idleTimeout; d > 0 {
			c.rwc.SetReadDeadline(time.Now().Add(d))
		} else {
			c.rwc.SetReadDeadline(time.Time{})
		}
		if _, err := c.br.Peek(4); err != nil {
			return
		}
		if d := s.readHeaderTimeout; d > 0 {
			c.rwc.SetReadDeadline(time.Now().Add(d))
		} else {
			c.rwc.SetReadDeadline(time.Time{})
		}
	}
}

// tlsOf finds the *tls.Conn under c's wrappers (the framing check).
func tlsOf(c net.Conn) (*tls.Conn, bool) {
	for {
		if tc, ok := c.(*tls.Conn); ok {
			return tc, true
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		c = w.NetConn()
	}
}

// h1StatusError is an answer other than 400 to a request that could not be served.
type h1StatusError struct {
	code int
	text string
}

func (e h1StatusError) Error() string { return strconv.Itoa(e.code) + " " + e.text }

// errBadRequest is a request net/http's server refuses beyond what ReadRequest does, answered
// as it answers it.
func errBadRequest(text string) error { return h1StatusError{http.StatusBadRequest, text} }

func isCommonNetReadError(err error) bool {
	if err == io.EOF {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "read"
}

// readRequest reads the next request with http.ReadRequest and checks it as net/http's server
// does.
func (c *h1SrvConn) readRequest(ctx context.Context) (*h1Response, error) {
	if err := resumeFraming(c.rwc); err != nil {
		return nil, err
	}
	c.r.setLimit(maxHeaderBytes)
	if c.lastMethod == http.MethodPost {
		peek, _ := c.br.Peek(4)
		c.br.Discard(leadingCRorLF(peek))
	}
	req, err := http.ReadRequest(c.br)
	if err != nil {
		return nil, err
	}
	if req.ProtoMajor != 1 {
		return nil, h1StatusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	}
	c.r.setLimit(1<<63 - 1)
	// ReadRequest takes Host out of the header map and sets req.Host from an absolute-form
	// target's host where there is one, from the header where not. What net/http's server
	// checked of the Host header (one, valid, present in every HTTP/1.1 request but a CONNECT)
	// is checked by the framing check (framingConn), which every connection h1Server serves
	// passes through, and here where req.Host is the header's. The host of an absolute-form
	// target is not checked here, as net/http's server did not check it: the handler refuses a
	// host it cannot use, and records the refusal, naming the host.
	if req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect {
		return nil, errBadRequest("missing required Host header")
	}
	if req.URL.Host == "" && req.Host != "" && !httpguts.ValidHostHeader(req.Host) {
		return nil, errBadRequest("malformed Host header")
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, errBadRequest("invalid header name")
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, errBadRequest("invalid header value")
			}
		}
	}
	c.lastMethod = req.Method
	rctx, cancel := context.WithCancel(ctx)
	req = req.WithContext(rctx)
	req.RemoteAddr = c.remote
	req.TLS = c.tls
	c.rwc.SetReadDeadline(time.Time{})
	w := &h1Response{c: c, req: req, cancel: cancel, header: make(http.Header), contentLength: -1,
		wants10KeepAlive: req.ProtoMajor == 1 && req.ProtoMinor == 0 && hasToken(req.Header.Get("Connection"), "keep-alive"),
		wantsClose:       req.Close || hasToken(req.Header.Get("Connection"), "close"),
	}
	w.body = &h1ReqBody{w: w, rc: req.Body, remain: req.ContentLength}
	if req.Body == nil || req.Body == http.NoBody {
		w.body.rc, w.body.sawEOF = http.NoBody, true
	} else {
		req.Body = w.body
	}
	w.cw.w = w
	w.w = h1Bodies.Get().(*bufio.Writer)
	w.w.Reset(&w.cw)
	return w, nil
}

// optionsStar answers OPTIONS * as http.Server's globalOptionsHandler does.
func optionsStar(w *h1Response, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		if n, _ := io.CopyN(io.Discard, r.Body, 4<<10+1); n > 4<<10 {
			w.requestTooLarge()
		}
	}
}

func (c *h1SrvConn) isHijacked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hijacked
}

// startWatch arms the watch for w: after watchAfter, the connection is read in the background
// once w's body is read, and the client's close cancels w's context (net/http's background read).
func (c *h1SrvConn) startWatch(w *h1Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = w
	if c.watch == nil {
		c.watch = time.AfterFunc(watchAfter, c.watchFired)
	} else {
		c.watch.Reset(watchAfter)
	}
}

func (c *h1SrvConn) watchFired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.cur
	if w == nil || c.hijacked {
		return
	}
	w.watchDue = true
	if w.body.eofSeen() {
		c.r.startBackgroundRead()
	} else if f := c.srv.watched; f != nil {
		f("due", 0)
	}
}

// bodyRead starts the watch, when it is due, once w's body is all read.
func (c *h1SrvConn) bodyRead(w *h1Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == w && w.watchDue && !c.hijacked {
		c.r.startBackgroundRead()
	}
}

// endWatch stops the watch of w and any background read it started.
func (c *h1SrvConn) endWatch(w *h1Response) {
	c.mu.Lock()
	if c.cur == w {
		c.cur = nil
		c.watch.Stop()
	}
	c.mu.Unlock()
	c.r.abortPendingRead()
}

func (c *h1SrvConn) close() {
	c.finalFlush()
	c.rwc.Close()
}

func (c *h1SrvConn) finalFlush() {
	if c.br != nil {
		c.br.Reset(nil)
		h1Readers.Put(c.br)
		c.br = nil
	}
	if c.bw != nil {
		c.bw.Flush()
		c.bw.Reset(nil)
		h1Writers.Put(c.bw)
		c.bw = nil
	}
}

// closeWriteAndWait flushes, closes the write side where it can, and waits so that the
// client reads the answer before the reset a close with unread data brings.
func (c *h1SrvConn) closeWriteAndWait() {
	c.finalFlush()
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	time.Sleep(rstAvoidanceDelay)
}

// connErrorWriter writes to the connection and keeps its first error.
type connErrorWriter struct{ c *h1SrvConn }

func (w connErrorWriter) Write(p []byte) (int, error) {
	n, err := w.c.rwc.Write(p)
	if err != nil && w.c.werr == nil {
		w.c.werr = err
	}
	return n, err
}

// h1Reader is what the connection's bufio.Reader reads (net/http's connReader): it bounds the
// request head, and reads one byte in the background while a handler runs (the watch), which
// tells the client's close.
type h1Reader struct {
	c      *h1SrvConn
	mu     sync.Mutex
	cond   *sync.Cond
	remain int64

	hasByte bool
	byteBuf [1]byte
	inRead  bool
	aborted bool
	cancel  context.CancelFunc // the request's in the handler
	// connCancel cancels the connection's context, from which every request's derives.
	connCancel context.CancelFunc
}

func (r *h1Reader) setLimit(n int64) {
	r.mu.Lock()
	r.remain = n
	r.mu.Unlock()
}

func (r *h1Reader) Read(p []byte) (int, error) {
	r.mu.Lock()
	if r.inRead {
		r.mu.Unlock()
		panic("gateway: concurrent read of an HTTP/1 connection")
	}
	if r.remain <= 0 {
		r.mu.Unlock()
		return 0, io.EOF
	}
	if len(p) == 0 {
		r.mu.Unlock()
		return 0, nil
	}
	if int64(len(p)) > r.remain {
		p = p[:r.remain]
	}
	if r.hasByte {
		p[0] = r.byteBuf[0]
		r.hasByte = false
		r.remain--
		r.mu.Unlock()
		return 1, nil
	}
	r.inRead = true
	r.mu.Unlock()
	n, err := r.c.rwc.Read(p)
	r.mu.Lock()
	r.inRead = false
	if err != nil {
		r.readFailed()
	}
	r.remain -= int64(n)
	r.mu.Unlock()
	r.cond.Broadcast()
	return n, err
}

// readFailed cancels the request in the handler and the connection's context after a read of
// the connection failed (the client closed it, or a deadline passed). Called under r.mu.
func (r *h1Reader) readFailed() {
	if r.cancel != nil {
		r.cancel()
	}
	if r.connCancel != nil {
		r.connCancel()
	}
}

// leadingCRorLF counts the CR and LF bytes b begins with.
func leadingCRorLF(b []byte) int {
	n := 0
	for _, c := range b {
		if c != '\r' && c != '\n' {
			break
		}
		n++
	}
	return n
}

// startBackgroundRead reads one byte of the connection in a goroutine; a read error (the
// client closed) cancels the request in the handler. Called under c.mu.
func (r *h1Reader) startBackgroundRead() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inRead || r.hasByte {
		return
	}
	r.inRead = true
	if w := r.c.cur; w != nil {
		r.cancel = w.cancel
	}
	r.c.rwc.SetReadDeadline(time.Time{})
	go r.backgroundRead()
	if f := r.c.srv.watched; f != nil {
		f("started", 0)
	}
}

func (r *h1Reader) backgroundRead() {
	n, err := r.c.rwc.Read(r.byteBuf[:])
	r.mu.Lock()
	if n == 1 {
		r.hasByte = true
	}
	var ne net.Error
	if errors.As(err, &ne) && r.aborted && ne.Timeout() {
		// Ended by abortPendingRead, not by the client.
	} else if err != nil {
		r.readFailed()
	}
	r.aborted = false
	r.inRead = false
	r.mu.Unlock()
	r.cond.Broadcast()
	if f := r.c.srv.watched; f != nil {
		f("ended", n)
	}
}

// abortPendingRead ends a background read under way and waits for it.
func (r *h1Reader) abortPendingRead() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancel = nil
	if !r.inRead {
		return
	}
	r.aborted = true
	r.c.rwc.SetReadDeadline(pastDeadline)
	for r.inRead {
		r.cond.Wait()
	}
	r.c.rwc.SetReadDeadline(time.Time{})
}

// h1ReqBody is a request's body as its handler reads it: net/http's own body reader, with the
// 100 Continue written before the first read when the client waits for it, and what the
// server must know after the handler (read to its end, closed early).
type h1ReqBody struct {
	w      *h1Response
	rc     io.ReadCloser
	remain int64 // bytes of a Content-Length body not read yet; -1 when chunked

	// readMu is held across every read of rc and by Close, so that no read of rc is under way
	// or begins once Close has returned: a reader that outlives the handler (http.Transport's
	// writer, when the upstream answered first) must not read the connection's bufio.Reader
	// once the next request, or another connection, has it. net/http's body holds its own
	// mutex the same way.
	readMu sync.Mutex

	mu          sync.Mutex
	expect      bool // the client waits for 100 Continue
	sawEOF      bool
	closed      bool
	earlyClosed bool // closed with more left than is drained
	err         error
}

func (b *h1ReqBody) eofSeen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sawEOF
}

func (b *h1ReqBody) Read(p []byte) (int, error) {
	b.readMu.Lock()
	defer b.readMu.Unlock()
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

// readLocked reads rc, under readMu.
func (b *h1ReqBody) readLocked(p []byte) (int, error) {
	w := b.w
	if w.canContinue.Load() {
		w.continueMu.Lock()
		if w.canContinue.Load() {
			w.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			w.c.bw.Flush()
			w.canContinue.Store(false)
			w.sentCont = true
		}
		w.continueMu.Unlock()
	}
	n, err := b.rc.Read(p)
	b.mu.Lock()
	if b.remain > 0 {
		b.remain -= int64(n)
	}
	eof := err == io.EOF && !b.sawEOF
	if err == io.EOF {
		b.sawEOF = true
	} else if err != nil && b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	if eof {
		w.c.bodyRead(w)
	}
	return n, err
}

// lockedReader reads a body whose readMu its caller holds.
type lockedReader struct{ b *h1ReqBody }

func (r lockedReader) Read(p []byte) (int, error) { return r.b.readLocked(p) }

// Close closes the body as net/http's server does (its early close): what is left is drained
// up to maxPostHandlerReadBytes, and beyond that, or when its length says it is more, left,
// the connection closed after the answer. It waits for a read under way.
func (b *h1ReqBody) Close() error {
	b.readMu.Lock()
	defer b.readMu.Unlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	done, remain, expect := b.sawEOF || b.err != nil, b.remain, b.expect
	b.mu.Unlock()
	var err error
	switch {
	case done:
	case expect && !b.w.continued():
		// The client waits for 100 Continue before it sends the body: there is nothing to
		// drain, and the connection is closed after the answer (see writeHeader).
	case remain > maxPostHandlerReadBytes:
		b.mu.Lock()
		b.earlyClosed = true
		b.mu.Unlock()
	default:
		var n int64
		n, err = io.CopyN(io.Discard, lockedReader{b}, maxPostHandlerReadBytes)
		if n == maxPostHandlerReadBytes {
			b.mu.Lock()
			b.earlyClosed = true
			b.mu.Unlock()
		} else if err == io.EOF {
			err = nil
		}
	}
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return err
}

// h1Response is the http.ResponseWriter of one request (net/http's response and chunkWriter).
type h1Response struct {
	c                *h1SrvConn
	req              *http.Request
	body             *h1ReqBody
	cancel           context.CancelFunc
	header           http.Header // the handler's
	w                *bufio.Writer
	cw               h1ChunkWriter
	wants10KeepAlive bool
	wantsClose       bool

	wroteHeader   bool
	status        int
	contentLength int64
	written       int64
	closeAfter    bool
	bodyLimitHit  bool
	handlerDone   bool
	calledHeader  bool
	trailers      []string
	watchDue      bool // under c.mu
	dateBuf       [len(http.TimeFormat)]byte
	clenBuf       [20]byte

	canContinue atomic.Bool
	continueMu  sync.Mutex
	sentCont    bool // under continueMu: a 100 Continue went out
}

var (
	_ http.ResponseWriter = (*h1Response)(nil)
	_ http.Hijacker       = (*h1Response)(nil)
)

// continued reports whether a 100 Continue went out.
func (w *h1Response) continued() bool {
	w.continueMu.Lock()
	defer w.continueMu.Unlock()
	return w.sentCont
}

func (w *h1Response) disableContinue() {
	w.continueMu.Lock()
	w.canContinue.Store(false)
	w.continueMu.Unlock()
}

func (w *h1Response) Header() http.Header {
	if w.cw.header == nil && w.wroteHeader && !w.cw.wroteHeader {
		w.cw.header = w.header.Clone()
	}
	w.calledHeader = true
	return w.header
}

func (w *h1Response) WriteHeader(code int) {
	if w.c.isHijacked() || w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 101 || code > 199 {
		w.disableContinue()
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		writeStatusLine(w.c.bw, w.req.ProtoAtLeast(1, 1), code)
		w.header.WriteSubset(w.c.bw, excludedNoBody)
		w.c.bw.WriteString("\r\n")
		w.c.bw.Flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	if w.calledHeader && w.cw.header == nil {
		w.cw.header = w.header.Clone()
	}
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.header.Del("Content-Length")
		}
	}
}

func (w *h1Response) Write(p []byte) (int, error) {
	if w.c.isHijacked() {
		return 0, http.ErrHijacked
	}
	if w.canContinue.Load() {
		w.disableContinue()
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	return w.w.Write(p)
}

// FlushError sends what is written so far.
func (w *h1Response) FlushError() error {
	if w.c.isHijacked() {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	err := w.w.Flush()
	if e := w.cw.flush(); err == nil {
		err = e
	}
	return err
}

func (w *h1Response) Flush() { w.FlushError() }

func (w *h1Response) SetReadDeadline(t time.Time) error  { return w.c.rwc.SetReadDeadline(t) }
func (w *h1Response) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }

// Hijack hands the connection over, with what was read ahead of it.
func (w *h1Response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.handlerDone {
		panic("gateway: Hijack called after the handler returned")
	}
	if w.wroteHeader {
		w.cw.flush()
	}
	c := w.c
	c.mu.Lock()
	if c.hijacked {
		c.mu.Unlock()
		return nil, nil, http.ErrHijacked
	}
	c.hijacked = true
	c.cur = nil
	if c.watch != nil {
		c.watch.Stop()
	}
	c.mu.Unlock()
	c.r.abortPendingRead()
	c.rwc.SetDeadline(time.Time{})
	c.r.mu.Lock()
	hasByte := c.r.hasByte
	c.r.mu.Unlock()
	if hasByte {
		if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
			return nil, nil, fmt.Errorf("unexpected Peek failure reading buffered byte: %v", err)
		}
	}
	c.bw.Flush()
	return c.rwc, bufio.NewReadWriter(c.br, bufio.NewWriter(c.rwc)), nil
}

func (w *h1Response) requestTooLarge() {
	w.closeAfter = true
	w.bodyLimitHit = true
	if !w.wroteHeader {
		w.Header().Set("Connection", "close")
	}
}

// finish completes the answer after the handler (net/http's finishRequest).
func (w *h1Response) finish() {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.w.Flush()
	w.w.Reset(nil)
	h1Bodies.Put(w.w)
	w.w = nil
	w.cw.close()
	w.c.bw.Flush()
	w.c.endWatch(w)
	w.body.Close()
}

func (w *h1Response) shouldReuse() bool {
	if w.closeAfter {
		return false
	}
	if w.req.Method != http.MethodHead && w.contentLength != -1 && bodyAllowedForStatus(w.status) && w.contentLength != w.written {
		return false
	}
	if !w.cw.wroteHeader || w.c.werr != nil {
		return false
	}
	return !w.body.earlyClosed
}

// h1ChunkWriter writes the head on the first write and chunks the body when its length is
// unknown (net/http's chunkWriter).
type h1ChunkWriter struct {
	w           *h1Response
	header      http.Header // the header as it was at WriteHeader, when it was touched before
	wroteHeader bool
	chunking    bool
}

func (cw *h1ChunkWriter) Write(p []byte) (n int, err error) {
	if !cw.wroteHeader {
		cw.writeHeader(p)
	}
	if cw.w.req.Method == http.MethodHead {
		return len(p), nil
	}
	bw := cw.w.c.bw
	if cw.chunking {
		if _, err = fmt.Fprintf(bw, "%x\r\n", len(p)); err != nil {
			cw.w.c.rwc.Close()
			return
		}
	}
	n, err = bw.Write(p)
	if cw.chunking && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		cw.w.c.rwc.Close()
	}
	return
}

func (cw *h1ChunkWriter) flush() error {
	if !cw.wroteHeader {
		cw.writeHeader(nil)
	}
	return cw.w.c.bw.Flush()
}

func (cw *h1ChunkWriter) close() {
	if !cw.wroteHeader {
		cw.writeHeader(nil)
	}
	if cw.chunking {
		bw := cw.w.c.bw
		bw.WriteString("0\r\n")
		if t := cw.w.finalTrailers(); t != nil {
			t.Write(bw)
		}
		bw.WriteString("\r\n")
	}
}

func (w *h1Response) finalTrailers() http.Header {
	var t http.Header
	for k, vv := range w.header {
		if kk, found := strings.CutPrefix(k, http.TrailerPrefix); found {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if t == nil {
			t = make(http.Header)
		}
		for _, v := range w.header[k] {
			t.Add(k, v)
		}
	}
	return t
}

func (w *h1Response) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if !httpguts.ValidTrailerHeader(k) {
		return
	}
	w.trailers = append(w.trailers, k)
}

var excludedNoBody = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}

// writeHeader writes the answer's head before its first bytes p, deciding its framing as
// net/http's chunkWriter.writeHeader does.
func (cw *h1ChunkWriter) writeHeader(p []byte) {
	if cw.wroteHeader {
		return
	}
	cw.wroteHeader = true
	w := cw.w
	isHEAD := w.req.Method == http.MethodHead
	header := cw.header
	owned := header != nil
	if !owned {
		header = w.header
	}
	var exclude map[string]bool
	delHeader := func(key string) {
		if owned {
			header.Del(key)
			return
		}
		if _, ok := header[key]; !ok {
			return
		}
		if exclude == nil {
			exclude = map[string]bool{}
		}
		exclude[key] = true
	}
	var extra h1ExtraHeader

	trailers := false
	for k := range cw.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if exclude == nil {
				exclude = map[string]bool{}
			}
			exclude[k] = true
			trailers = true
		}
	}
	for _, v := range cw.header["Trailer"] {
		trailers = true
		foreachHeaderElement(v, w.declareTrailer)
	}

	te := header.Get("Transfer-Encoding")
	hasTE := te != ""
	if w.handlerDone && !trailers && !hasTE && bodyAllowedForStatus(w.status) && !hasKey(header, "Content-Length") && (!isHEAD || len(p) > 0) {
		w.contentLength = int64(len(p))
		extra.contentLength = strconv.AppendInt(w.clenBuf[:0], int64(len(p)), 10)
	}
	if w.wants10KeepAlive {
		if header.Get("Content-Length") != "" && header.Get("Connection") == "keep-alive" {
			w.closeAfter = false
		}
	}
	hasCL := w.contentLength != -1
	if w.wants10KeepAlive && (isHEAD || hasCL || !bodyAllowedForStatus(w.status)) {
		if _, set := header["Connection"]; !set {
			extra.connection = "keep-alive"
		}
	} else if !w.req.ProtoAtLeast(1, 1) || w.wantsClose {
		w.closeAfter = true
	}
	if header.Get("Connection") == "close" {
		w.closeAfter = true
	}
	b := w.body
	b.mu.Lock()
	expectUnread := b.expect && !b.sawEOF
	b.mu.Unlock()
	if expectUnread {
		w.closeAfter = true
	}
	if w.req.ContentLength != 0 && !w.closeAfter && !b.expect {
		var discard, tooBig bool
		b.mu.Lock()
		switch {
		case b.closed:
			if !b.sawEOF {
				w.closeAfter = true
			}
		case b.remain >= maxPostHandlerReadBytes:
			tooBig = true
		default:
			discard = true
		}
		b.mu.Unlock()
		if discard {
			_, err := io.CopyN(io.Discard, b, maxPostHandlerReadBytes+1)
			switch err {
			case nil:
				tooBig = true
			case http.ErrBodyReadAfterClose:
				w.closeAfter = true
			case io.EOF:
			default:
				w.closeAfter = true
			}
		}
		if tooBig {
			w.requestTooLarge()
			delHeader("Connection")
			extra.connection = "close"
		}
	}

	code := w.status
	if bodyAllowedForStatus(code) {
		_, haveType := header["Content-Type"]
		if header.Get("Content-Encoding") == "" && !haveType && !hasTE && len(p) > 0 {
			extra.contentType = http.DetectContentType(p)
		}
	} else {
		for _, k := range suppressedHeaders(code) {
			delHeader(k)
		}
	}
	if _, ok := header["Date"]; !ok {
		extra.date = time.Now().UTC().AppendFormat(w.dateBuf[:0], http.TimeFormat)
	}
	if hasCL && hasTE && te != "identity" {
		delHeader("Content-Length")
		hasCL = false
	}
	if isHEAD || !bodyAllowedForStatus(code) || code == http.StatusNoContent {
		delHeader("Transfer-Encoding")
	} else if hasCL {
		delHeader("Transfer-Encoding")
	} else if w.req.ProtoAtLeast(1, 1) {
		if hasTE && te == "identity" {
			cw.chunking = false
			w.closeAfter = true
			delHeader("Transfer-Encoding")
		} else {
			cw.chunking = true
			extra.transferEncoding = "chunked"
			if hasTE && te == "chunked" {
				delHeader("Transfer-Encoding")
			}
		}
	} else {
		w.closeAfter = true
		delHeader("Transfer-Encoding")
	}
	if cw.chunking {
		delHeader("Content-Length")
	}
	if w.closeAfter && !hasToken(cw.header.Get("Connection"), "close") && !isProtocolSwitch(w.status, header) {
		delHeader("Connection")
		if w.req.ProtoAtLeast(1, 1) {
			extra.connection = "close"
		}
	}
	bw := w.c.bw
	writeStatusLine(bw, w.req.ProtoAtLeast(1, 1), code)
	cw.header.WriteSubset(bw, exclude)
	extra.write(bw)
	bw.WriteString("\r\n")
}

// h1ExtraHeader is what writeHeader adds to the handler's header (net/http's extraHeader).
type h1ExtraHeader struct {
	contentType      string
	connection       string
	transferEncoding string
	date             []byte
	contentLength    []byte
}

func (h h1ExtraHeader) write(w *bufio.Writer) {
	if h.date != nil {
		w.WriteString("Date: ")
		w.Write(h.date)
		w.WriteString("\r\n")
	}
	if h.contentLength != nil {
		w.WriteString("Content-Length: ")
		w.Write(h.contentLength)
		w.WriteString("\r\n")
	}
	for i, v := range [...]string{h.contentType, h.connection, h.transferEncoding} {
		if v != "" {
			w.WriteString([...]string{"Content-Type: ", "Connection: ", "Transfer-Encoding: "}[i])
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
}

func writeStatusLine(bw *bufio.Writer, is11 bool, code int) {
	if is11 {
		bw.WriteString("HTTP/1.1 ")
	} else {
		bw.WriteString("HTTP/1.0 ")
	}
	if text := http.StatusText(code); text != "" {
		var scratch [3]byte
		bw.Write(strconv.AppendInt(scratch[:0], int64(code), 10))
		bw.WriteByte(' ')
		bw.WriteString(text)
		bw.WriteString("\r\n")
	} else {
		fmt.Fprintf(bw, "%03d status code %d\r\n", code, code)
	}
}

func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == 204, status == 304:
		return false
	}
	return true
}

func suppressedHeaders(status int) []string {
	switch {
	case status == 304:
		return []string{"Content-Type", "Content-Length", "Transfer-Encoding"}
	case bodyAllowedForStatus(status):
		return nil
	}
	return []string{"Content-Length", "Transfer-Encoding"}
}

func isProtocolSwitch(code int, h http.Header) bool {
	return code == http.StatusSwitchingProtocols && h.Get("Upgrade") != "" && httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade")
}

func hasToken(v, token string) bool {
	return httpguts.HeaderValuesContainsToken([]string{v}, token)
}

func hasKey(h http.Header, k string) bool {
	_, ok := h[k]
	return ok
}

func foreachHeaderElement(v string, fn func(string)) {
	v = textproto.TrimString(v)
	if v == "" {
		return
	}
	for f := range strings.SplitSeq(v, ",") {
		if f = textproto.TrimString(f); f != "" {
			fn(f)
		}
	}
}
