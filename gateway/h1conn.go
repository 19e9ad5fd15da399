package gateway

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1Transport makes the common HTTP/1.1 round trip on the request's own goroutine: a request
// without a body, no upgrade, no Expect, to an http or https upstream, on a connection of its
// own pool. Every byte of framing is still written and read by net/http (Request.Write,
// http.ReadResponse); what it saves is http.Transport's hand-offs between the request's
// goroutine and each connection's reader and writer goroutines. Anything else goes to t, whose
// settings (dialer, TLS configuration and client certificate, timeouts) the fast path uses too.
type h1Transport struct {
	t    *http.Transport // HTTP/1.1 only (newTransports' h1, or a client certificate's clone of it)
	pool *h1Pool
}

// The limits http.Transport keeps by default, kept here too.
const (
	h1MaxHeaderBytes = 10 << 20 // all the heads of one answer, 1xx included, unless handed on
	h1MaxIdle        = 512      // idle connections in all
)

var (
	errH1HeadTooLarge = fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", h1MaxHeaderBytes)
	errH1HeadTimeout  = errors.New("net/http: timeout awaiting response headers")
	errH1ReadClosed   = errors.New("http: read on closed response body")
	errH1Unexpected   = errors.New("net/http: upstream switched protocols unasked")
)

// h1Key is what a connection was opened for; it carries only requests of the same key. t is
// the transport whose TLS configuration (and so client certificate) it was opened with: one per
// protocol, lease and certificate (transports.forCert).
type h1Key struct {
	t      *http.Transport
	scheme string
	addr   string // dialled
	server string // TLS server name
}

// RoundTrip sends req on a pooled or new connection, or hands it to the transport when it is not
// the common case.
func (h *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	gz := h1Fits(req, h.t)
	if gz < 0 {
		return h.t.RoundTrip(req)
	}
	ctx := req.Context()
	key := h1Key{t: h.t, scheme: req.URL.Scheme, addr: req.URL.Host, server: tlsHost(req.URL.Host)}
	trace := httptrace.ContextClientTrace(ctx)
	c := h.pool.get(key)
	for {
		if c == nil {
			var err error
			if c, err = h.dial(ctx, key); err != nil {
				return nil, err
			}
		}
		resp, retry, err := c.roundTrip(ctx, req, trace, gz == 1)
		if err == nil {
			return resp, nil
		}
		if !retry || ctx.Err() != nil {
			return nil, err
		}
		// A connection that sat idle failed before any byte of an answer came, and the request
		// may be sent again: the upstream closed it meanwhile. Once more, on a new connection
		// (whose failure is not retried).
		c = nil
	}
}

// h1Fits says whether req takes the fast path: -1 if not, 1 if the transport would ask for gzip
// (and decode it) where the client asked for no encoding, else 0. What http.Transport refuses
// (invalid methods and header fields) goes to it, to be refused as it refuses it.
func h1Fits(req *http.Request, t *http.Transport) int {
	if req.URL == nil || req.Header == nil || req.URL.Host == "" ||
		(req.URL.Scheme != "http" && req.URL.Scheme != "https") ||
		(req.Body != nil && req.Body != http.NoBody) || req.ContentLength != 0 || len(req.Trailer) != 0 ||
		req.Method == "" || req.Method == http.MethodConnect || strings.IndexFunc(req.Method, isNotToken) >= 0 {
		return -1
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return -1
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return -1
			}
		}
	}
	h := req.Header
	if _, ok := h["Expect"]; ok {
		return -1
	}
	if _, ok := h["Upgrade"]; ok || httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") {
		return -1
	}
	if _, has := h["Accept-Encoding"]; has && h.Get("Accept-Encoding") == "" {
		return -1 // the transport would add its own beside an empty one
	}
	if !t.DisableCompression && h.Get("Accept-Encoding") == "" && h.Get("Range") == "" && req.Method != http.MethodHead {
		return 1
	}
	return 0
}

func isNotToken(r rune) bool { return !httpguts.IsTokenRune(r) }

// tlsHost is the server name for a dial address, as http.Transport takes it (host[:port]).
func tlsHost(addr string) string {
	if i := strings.LastIndex(addr, ":"); i >= 0 && !strings.HasSuffix(addr[i:], "]") {
		return addr[:i]
	}
	return addr
}

// dial opens a connection for key, as the transport would: its dialer, then TLS with its
// configuration, HTTP/1.1 only.
func (h *h1Transport) dial(ctx context.Context, key h1Key) (*h1Conn, error) {
	dial := h.t.DialContext
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, "tcp", key.addr)
	if err != nil {
		return nil, err
	}
	if key.scheme == "https" {
		var cfg *tls.Config
		if h.t.TLSClientConfig != nil {
			cfg = h.t.TLSClientConfig.Clone()
		} else {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = key.server
		}
		cfg.NextProtos = nil
		tc := tls.Client(conn, cfg)
		hctx := ctx
		if d := h.t.TLSHandshakeTimeout; d > 0 {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		if err := tc.HandshakeContext(hctx); err != nil {
			conn.Close()
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return nil, errors.New("net/http: TLS handshake timeout")
			}
			return nil, err
		}
		conn = tc
	}
	c := &h1Conn{key: key, conn: conn, pool: h.pool, headTimeout: h.t.ResponseHeaderTimeout, perKey: h.t.MaxIdleConnsPerHost}
	if c.perKey <= 0 {
		c.perKey = http.DefaultMaxIdleConnsPerHost
	}
	c.br = bufio.NewReader(c)
	c.bw = bufio.NewWriter(conn)
	return c, nil
}

// h1Conn is one upstream connection. Idle, it is in its pool; in a round trip, it is its
// request's alone until the answer's body ends (back to the pool) or is given up (closed).
type h1Conn struct {
	key         h1Key
	conn        net.Conn
	br          *bufio.Reader // reads through the conn's Read, which keeps the head limit
	bw          *bufio.Writer
	pool        *h1Pool
	headTimeout time.Duration
	perKey      int
	limit       int64 // what br may still read: the head limit while a head is read

	// guarded by pool.mu
	idle   bool
	idleAt time.Time
	timer  *time.Timer
	used   bool // has carried a round trip
}

// Read is the conn's, but no more than the limit: an upstream cannot make a head grow without
// bound.
func (c *h1Conn) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, errH1HeadTooLarge
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.conn.Read(p)
	c.limit -= int64(n)
	return n, err
}

// roundTrip writes req and reads its answer, handing informational answers to the trace. retry
// reports an error of a reused connection before any byte of an answer, for a request that may
// be sent again.
func (c *h1Conn) roundTrip(ctx context.Context, req *http.Request, trace *httptrace.ClientTrace, gz bool) (resp *http.Response, retry bool, err error) {
	reused := c.used
	c.used = true
	if trace != nil && trace.GotConn != nil {
		ci := httptrace.GotConnInfo{Conn: c.conn, Reused: reused, WasIdle: reused}
		if reused {
			ci.IdleTime = time.Since(c.idleAt)
		}
		trace.GotConn(ci)
	}
	// A cut or a client gone cancels the context: the connection closes at once, so a blocked
	// write or read returns.
	stop := context.AfterFunc(ctx, func() { c.conn.Close() })
	fail := func(err error) error {
		stop()
		c.conn.Close()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	if gz {
		req.Header["Accept-Encoding"] = []string{"gzip"}
	}
	err = req.Write(c.bw)
	if gz {
		delete(req.Header, "Accept-Encoding")
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return nil, reused && replayable(req), fail(err)
	}
	if c.headTimeout > 0 {
		c.conn.SetReadDeadline(time.Now().Add(c.headTimeout))
	}
	c.limit = h1MaxHeaderBytes
	if _, err := c.br.Peek(1); err != nil {
		if isTimeout(err) && ctx.Err() == nil {
			return nil, false, fail(errH1HeadTimeout)
		}
		return nil, reused && replayable(req), fail(err)
	}
	for {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			if isTimeout(err) && ctx.Err() == nil {
				err = errH1HeadTimeout
			}
			return nil, false, fail(err)
		}
		code := resp.StatusCode
		if code == http.StatusSwitchingProtocols {
			return nil, false, fail(errH1Unexpected) // only upgrade requests take it, and they go to the transport
		}
		if code < 100 || code > 199 {
			break
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, false, fail(err)
			}
			c.limit = h1MaxHeaderBytes // handed on: the limit is per head
		}
	}
	c.limit = math.MaxInt64
	if c.headTimeout > 0 {
		c.conn.SetReadDeadline(time.Time{})
	}
	if tc, ok := c.conn.(*tls.Conn); ok {
		st := tc.ConnectionState()
		resp.TLS = &st
	}
	keep := !resp.Close && !req.Close
	if resp.Body == http.NoBody || req.Method == http.MethodHead {
		resp.Body = http.NoBody
		if stop() && keep && c.br.Buffered() == 0 {
			c.pool.put(c)
		} else {
			c.conn.Close()
		}
		return resp, false, nil
	}
	b := &h1Body{c: c, r: resp.Body, stop: stop, keep: keep, ctx: ctx}
	resp.Body = b
	if gz && strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		resp.Body = &h1Gzip{body: b}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Uncompressed = true
	}
	return resp, false, nil
}

// replayable is http.Request's isReplayable for a request without a body.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// h1Body is an answer's body. Read to its end with framing that lets the connection carry
// another request, it puts the connection back in its pool; closed before, or failed, it
// closes it. Close may come from another goroutine than Read's (a cut).
type h1Body struct {
	c     *h1Conn
	r     io.Reader // net/http's reader of the body's framing
	stop  func() bool
	keep  bool
	ctx   context.Context
	state atomic.Int32 // h1Open, h1EOF or h1Closed
}

const (
	h1Open int32 = iota
	h1EOF
	h1Closed
)

func (b *h1Body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case h1EOF:
		return 0, io.EOF
	case h1Closed:
		return 0, errH1ReadClosed
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		if b.state.CompareAndSwap(h1Open, h1EOF) {
			if b.stop() && b.keep && b.c.br.Buffered() == 0 {
				b.c.pool.put(b.c)
			} else {
				b.c.conn.Close()
			}
		}
	case err != nil:
		b.Close()
		if b.ctx.Err() != nil {
			err = context.Cause(b.ctx)
		}
	}
	return n, err
}

func (b *h1Body) Close() error {
	if b.state.CompareAndSwap(h1Open, h1Closed) {
		b.stop()
		b.c.conn.Close()
	}
	return nil
}

// h1Gzip decodes a body the transport's way asked for in gzip.
type h1Gzip struct {
	body *h1Body
	zr   *gzip.Reader
	err  error
}

func (g *h1Gzip) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.body)
		if err != nil {
			g.err = err
			return 0, err
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil {
		g.err = err
	}
	return n, err
}

func (g *h1Gzip) Close() error { return g.body.Close() }

// h1Pool holds the idle connections of every h1Transport of a Proxy, by key: at most h1MaxIdle
// in all and the transport's MaxIdleConnsPerHost per key, each closed after the transport's
// IdleConnTimeout idle.
type h1Pool struct {
	mu     sync.Mutex
	idle   map[h1Key][]*h1Conn // most recently used last
	n      int
	closed bool
}

// get takes the key's most recently used idle connection that is still clean (nothing to read
// on it: the upstream has neither closed it nor sent anything unasked), or nil.
func (pl *h1Pool) get(key h1Key) *h1Conn {
	for {
		pl.mu.Lock()
		cs := pl.idle[key]
		if len(cs) == 0 {
			pl.mu.Unlock()
			return nil
		}
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		if len(cs) == 1 {
			delete(pl.idle, key)
		} else {
			pl.idle[key] = cs[:len(cs)-1]
		}
		pl.n--
		c.idle = false
		c.timer.Stop() // nothing to expire: a timer left running would keep c for its timeout
		pl.mu.Unlock()
		if quiet(c.conn) {
			return c
		}
		c.conn.Close()
	}
}

// put makes c idle, or closes it when the pool is full or closed.
func (pl *h1Pool) put(c *h1Conn) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed || pl.n >= h1MaxIdle || len(pl.idle[c.key]) >= c.perKey {
		c.conn.Close()
		return
	}
	if pl.idle == nil {
		pl.idle = map[h1Key][]*h1Conn{}
	}
	pl.idle[c.key] = append(pl.idle[c.key], c)
	pl.n++
	c.idle = true
	c.idleAt = time.Now()
	timeout := c.key.t.IdleConnTimeout
	if timeout <= 0 {
		timeout = 90 * time.Second
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(timeout, func() { pl.expire(c, timeout) })
	} else {
		c.timer.Reset(timeout)
	}
}

// expire closes c if it has stayed idle for timeout.
func (pl *h1Pool) expire(c *h1Conn, timeout time.Duration) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if !c.idle || time.Since(c.idleAt) < timeout {
		return
	}
	pl.remove(c)
	c.conn.Close()
}

// remove takes idle c out of its key's list; pl.mu held.
func (pl *h1Pool) remove(c *h1Conn) {
	cs := pl.idle[c.key]
	for i, o := range cs {
		if o == c {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(pl.idle, c.key)
	} else {
		pl.idle[c.key] = cs
	}
	pl.n--
	c.idle = false
}

// drop closes the idle connections opened with t (a lease's transport let go).
func (pl *h1Pool) drop(t *http.Transport) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for k, cs := range pl.idle {
		if k.t != t {
			continue
		}
		for _, c := range cs {
			c.idle = false
			c.conn.Close()
		}
		pl.n -= len(cs)
		delete(pl.idle, k)
	}
}

// close closes every idle connection; those in use close when their round trip ends, and new
// ones (a request after Close) are not kept.
func (pl *h1Pool) close() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.closed = true
	for k, cs := range pl.idle {
		for _, c := range cs {
			c.idle = false
			c.conn.Close()
		}
		delete(pl.idle, k)
	}
	pl.n = 0
}
