package gateway

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// forward carries one request of a sandbox upstream and the answer back. It reads top to
// bottom; each step either hands the next what it needs or refuses, and what it refuses is
// written and recorded by one function (deny):
//
//	admit    the decision, which needs no I/O: path form, scopes and catalog
//	inspect  what the request must pass before it is sent, reading what it needs of it: a git
//	         push's commands, an MCP message, the name guard, a protocol switch that could not be
//	         scrubbed, the trail, the budget, the signing cap (the body it signs), a reviewer
//	redecide the decision once more, as the recheck would make it now (see below)
//	resolve  where it goes (a recorded lookup), never a private address unless pinned
//	borrow   the credential, from the broker, only for a request that passed all of that
//	prepare  the request to send: connection and forwarding headers dropped, the credential
//	         applied, the path checked to be the one decided on
//	send     one round trip on the lease's transport (1xx answers relayed, scrubbed)
//	relay    the answer, scrubbed: headers, a protocol switch, the body, trailers
//
// From its decision until its answer has been relayed and its body read (and on as its stream,
// if its protocol is switched), the request is held as it was decided (see hold): when the
// recheck finds that its lease would refuse it now, it cuts it, and it ends here in an abort
// (an HTTP/1 connection closed, an HTTP/2 stream reset), its record saying why. The hold is
// taken before inspect, whose reads and wait the sandbox can stretch, so a cut ends them too;
// a change that came before the hold was taken (no recheck could see it) is seen by redecide,
// after inspect and before anything goes upstream. The hold is released before the request is
// recorded (record), so its record says whether it was cut.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, x *exchange) {
	if err := p.admit(r, x); err != nil {
		p.deny(w, x, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	p.held.take(x.held.request(x, w, cancel))
	defer func() {
		if p.held.release(&x.held) { // released already when it was recorded: says again if it was cut
			panic(http.ErrAbortHandler)
		}
	}()
	if err := p.inspect(ctx, r, x); err != nil {
		p.deny(w, x, err)
		return
	}
	if why := p.redecide(ctx, x); why != nil {
		x.event = audit.EventCut
		p.deny(w, x, why)
		return
	}
	if err := p.resolve(ctx, x); err != nil {
		p.deny(w, x, err)
		return
	}
	if err := p.borrow(ctx, x); err != nil {
		p.deny(w, x, err)
		return
	}
	out, err := p.prepare(ctx, r, x)
	if err != nil {
		p.deny(w, x, err)
		return
	}
	if out.Body != nil {
		// The transport may still be reading it when the answer is in; nothing may read a
		// request body once its handler has returned.
		defer out.Body.Close()
	}
	resp, err := p.send(out, w, x)
	if err != nil {
		p.deny(w, x, p.upstreamFailed(x, err))
		return
	}
	p.relay(w, r, resp, x)
}

// admit decides the request: the refusals that need no I/O.
func (p *Proxy) admit(r *http.Request, x *exchange) error {
	// The path is decided on exactly as it will be sent (prepare checks that it is).
	if err := scope.CheckPath(x.path); err != nil {
		return pathRefusal(err)
	}
	return p.decide(x, r.Method, x.path)
}

// inspect applies the refusals of an admitted request that read it or wait: under its hold, so
// that a cut ends a body read (the hold's deadlines) and a reviewer's wait (ctx, the hold's).
func (p *Proxy) inspect(ctx context.Context, r *http.Request, x *exchange) error {
	if x.scope.Git != nil {
		if err := checkGit(r, x); err != nil {
			return err
		}
	}
	if x.scope.MCP != nil {
		if err := p.checkMCP(r, x); err != nil {
			return err
		}
	}
	if err := p.guardName(x); err != nil {
		return err
	}
	if x.upgrade = upgradeType(r.Header); x.upgrade != "" && x.entry != nil {
		return refuse(http.StatusForbidden, rule.Unscrubbable,
			fmt.Sprintf("scope %s injects credential %q, and a %s stream could not be checked for it on the way back",
				x.scope, x.entry.Name, x.upgrade),
			"a scope without a credential for this upgrade, or a request that does not switch protocols")
	}
	if err := p.auditOK(); err != nil {
		return err
	}
	if err := p.startRequest(x, r); err != nil {
		return err
	}
	if err := boundSignedBody(r, x); err != nil {
		return err
	}
	return p.approve(ctx, r, x)
}

// auditOK refuses while the trail would refuse the record of what is about to pass. It asks
// through audit.Check, which reaches a Checker behind any sink that wraps it.
func (p *Proxy) auditOK() error {
	return audit.Check(p.cfg.Audit)
}

// decide applies the task's scopes and the credential catalog to one request, setting the
// matching scope and the credential entry to inject. It does no I/O: forward and Explain share it.
func (p *Proxy) decide(x *exchange, method, path string) error {
	d := p.dyn.Load()
	g, err := d.allow(x.b, x.host, x.port, method, path)
	if err != nil {
		return err
	}
	x.take(g)
	if g.scope.Credential != "" {
		// The credential goes where the request goes: the mirror, if there is one.
		scheme, host, port := x.sendTo()
		e, err := d.catalog.Authorize(g.scope.Credential, host, x.b.Tenant)
		if err != nil {
			return err
		}
		if err := e.CheckTransport(scheme, port); err != nil {
			return err
		}
		x.entry = e
	}
	return nil
}

// guardName refuses, before the gateway looks it up, a name under a wildcard scope that looks
// like data leaving: the same guard, and the same counts, as the resolver's.
func (p *Proxy) guardName(x *exchange) error {
	apex, ok := strings.CutPrefix(x.scope.Host, "*.")
	if !ok {
		return nil
	}
	if reason := p.cfg.Guard.Check(x.b.Lease, apex, x.host, time.Now()); reason != "" {
		return &Refusal{Status: http.StatusForbidden, Rule: rule.Tunnel, Reason: reason, Flagged: true,
			Hint: "names under a wildcard scope must not carry data; name the host in a scope of its own"}
	}
	return nil
}

// upgradeType is the protocol a request asks to switch to; "" when it asks for none.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// pathRefusal is the refusal of a request path that scope.CheckPath refused.
func pathRefusal(err error) *Refusal {
	return refuse(http.StatusBadRequest, rule.AmbiguousPath, err.Error(),
		"send the path in plain form: no dot segments, //, backslashes or percent-encoded / . \\")
}

// boundSignedBody enforces the signing cap of a SigV4 credential that hashes the payload: a body
// over it is refused before anything is sent, and a body under it is read here so that signing
// hashes memory, not the network.
func boundSignedBody(r *http.Request, x *exchange) error {
	if x.entry == nil || x.entry.Inject.Kind != broker.InjectSigV4 || x.entry.Inject.UnsignedPayload {
		return nil
	}
	limit := x.entry.Inject.MaxBody
	tooLarge := refuse(http.StatusRequestEntityTooLarge, rule.BodyTooLarge,
		fmt.Sprintf("credential %q signs the request body, and bodies over %d bytes are not signed", x.entry.Name, limit),
		"send less, or have the operator sign with UNSIGNED-PAYLOAD where the service accepts it")
	if r.ContentLength > limit {
		return tooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return refuse(http.StatusBadRequest, rule.BadRequest, "reading the request body: "+err.Error(), "")
	}
	if int64(len(b)) > limit {
		return tooLarge
	}
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader(string(b))), int64(len(b))
	return nil
}

// resolve vets where the request goes before anything is borrowed for it: a name that resolves
// only to private addresses never costs a credential. The lookup is recorded, and kept for the
// transport's dial, which uses the address vetted here.
func (p *Proxy) resolve(ctx context.Context, x *exchange) error {
	_, host, port := x.sendTo()
	_, err := p.dial.vet(ctx, host, port, p.recordLookup(x))
	return err
}

// borrow asks the broker for the credential the scope names, if any.
func (p *Proxy) borrow(ctx context.Context, x *exchange) error {
	if x.entry == nil {
		return nil
	}
	var err error
	x.secret, err = p.cfg.Broker.Get(ctx, broker.Lease{ID: x.b.Lease, Tenant: x.b.Tenant, Task: x.b.Task, Expires: x.b.Expires}, x.entry)
	return err
}

// hopHeaders belong to one connection, not to the request (RFC 9110 7.6.1); with the proxy's own
// and the forwarding headers a client could forge, they never go upstream.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

var forwardingHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// rangeHeaders ask for a part of an answer (Request-Range is an old name some servers still
// read); they never go upstream on a request that carries a credential.
var rangeHeaders = []string{"Range", "If-Range", "Request-Range"}

// removeHopHeaders removes the hop-by-hop headers from h, those Connection names included.
func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// prepare builds the request that goes upstream from r, under ctx: to the decided destination, with the
// connection's own and the forwarding headers dropped, unparsable query parameters removed, the
// credential applied (after every other header is final, since SigV4 signs them), and the path
// exactly the one decided on.
func (p *Proxy) prepare(ctx context.Context, r *http.Request, x *exchange) (*http.Request, error) {
	out := r.Clone(ctx)
	out.RequestURI, out.Close = "", false
	if r.ContentLength == 0 {
		out.Body = nil // no body to send: the transport may then retry a request on a stale connection
	} else if r.Body != nil && r.Body != http.NoBody {
		out.Body = &meteredBody{ReadCloser: r.Body, m: x.meter}
	}
	removeHopHeaders(out.Header)
	if x.upgrade != "" {
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", x.upgrade)
	}
	if httpguts.HeaderValuesContainsToken(r.Header["Te"], "trailers") {
		out.Header.Set("Te", "trailers") // the client takes trailers; say so
	}
	for _, k := range forwardingHeaders {
		out.Header.Del(k)
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // none, rather than the Go client's own
	}
	out.URL.RawQuery = cleanQuery(out.URL.RawQuery)
	scheme, host, port := x.sendTo()
	out.URL.Scheme = scheme
	out.URL.Host = net.JoinHostPort(host, strconv.Itoa(port))
	out.Host = host
	if !(scheme == "https" && port == 443) && !(scheme == "http" && port == 80) {
		out.Host = out.URL.Host
	}
	if got := out.URL.EscapedPath(); got != x.path {
		return nil, refuse(http.StatusInternalServerError, rule.AmbiguousPath,
			fmt.Sprintf("the path to send (%q) is not the path decided on (%q)", got, x.path), "")
	}
	if x.scope.MCP != nil {
		out.Header.Set("Accept-Encoding", "identity") // the answers are read for the tools they list
	}
	if x.entry != nil {
		// Scrubbing needs plain bytes back, and whole ones: a part of an answer can hold a piece
		// of the credential that no scrubbing recognises, and pieces join. Set before signing,
		// which covers the headers.
		out.Header.Set("Accept-Encoding", "identity")
		for _, k := range rangeHeaders {
			out.Header.Del(k)
		}
		injected, err := x.entry.Apply(out, x.secret)
		if err != nil {
			return nil, refuse(http.StatusBadGateway, rule.CredentialDown, err.Error(), "")
		}
		x.scrub = p.scrubbers.of(x.secret.Values(), injected)
	}
	return out, nil
}

// cleanQuery drops the query parameters that do not parse (a ';' separator, a broken escape),
// which upstreams would each read their own way; a query without them is sent as it came.
func cleanQuery(q string) string {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			v, _ := url.ParseQuery(q)
			return v.Encode()
		case '%':
			if i+2 >= len(q) || !isHexDigit(q[i+1]) || !isHexDigit(q[i+2]) {
				v, _ := url.ParseQuery(q)
				return v.Encode()
			}
			i += 2
		}
	}
	return q
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// send makes the round trip on x's transport. Informational answers (103 Early Hints and the
// like) go on to the sandbox as they arrive, scrubbed.
func (p *Proxy) send(out *http.Request, w http.ResponseWriter, x *exchange) (*http.Response, error) {
	t, err := p.transports.of(x)
	if err != nil {
		return nil, err
	}
	x.meter.commit() // the head goes upstream from here: it stays charged whatever happens next
	x.sent = true
	trace := &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) { x.upstream = ci.Conn.RemoteAddr().String() },
		Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
			h := w.Header()
			for k, vs := range header {
				h[k] = append(h[k], vs...)
			}
			if x.scrub != nil {
				x.scrub.scrubHeaders(h)
			}
			w.WriteHeader(code)
			clear(h) // a 1xx's headers are not the final answer's
			return nil
		},
	}
	return t.RoundTrip(out.WithContext(httptrace.WithClientTrace(out.Context(), trace)))
}

// upstreamFailed is the refusal for a round trip that failed: the recheck's when it cut the
// request, the budget's when the body went over it, the error's own when it is one, else the
// upstream's failure, named.
func (p *Proxy) upstreamFailed(x *exchange, err error) *Refusal {
	if why := x.held.cutBy(); why != nil {
		return why
	}
	if over := x.meter.over.Load(); over != nil {
		return over
	}
	ref := refusalFor(err)
	if ref.Rule == rule.UpstreamFailed {
		_, host, port := x.sendTo()
		ref.Reason = fmt.Sprintf("upstream %s:%d failed: %v", host, port, err)
	}
	return ref
}

// relay sends the upstream's answer to the sandbox and records the exchange.
func (p *Proxy) relay(w http.ResponseWriter, r *http.Request, resp *http.Response, x *exchange) {
	// Decided on the upstream's own framing: scrubbing or decoding a body of known length makes
	// its length unknown, not it a stream, and a flush per write would send each write's chunk
	// framing in records of its own (a scrubbed 1 GiB download went at half the speed).
	streams, bulk := flushesEachWrite(resp), resp.ContentLength >= bulkBody
	if x.scope.MCP != nil {
		if err := filterMCPResponse(resp, x.scope.MCP); err != nil {
			resp.Body.Close()
			p.deny(w, x, err)
			return
		}
	}
	if err := p.scrubResponse(resp, x); err != nil {
		resp.Body.Close()
		p.deny(w, x, err)
		return
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		p.switchProtocols(w, r, resp, x)
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = append(h[k], vs...)
	}
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			if x.scrub == nil || x.scrub.scrubString(k) == k { // a name that holds the credential is not announced
				keys = append(keys, k)
			}
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(resp.StatusCode)
	x.status = resp.StatusCode
	if announced > 0 {
		// Chunked from here, so net/http does not give a short body a Content-Length (and
		// drop the trailers).
		http.NewResponseController(w).Flush()
	}
	n, err := copyBody(w, resp.Body, streams, bulk)
	x.down = n
	// Trailers arrive with the end of the body; they go out when the handler returns.
	if len(resp.Trailer) == announced {
		for k, vs := range resp.Trailer {
			h[k] = vs
		}
	} else {
		for k, vs := range resp.Trailer {
			h[http.TrailerPrefix+k] = vs
		}
	}
	if x.scrub != nil {
		x.scrub.scrubHeaders(h)
	}
	x.up = x.meter.n.Load()
	p.record(x)
	if err != nil {
		// The answer was cut short: the sandbox must see it cut, not complete.
		panic(http.ErrAbortHandler)
	}
}

// flushesEachWrite reports whether the answer streams (unknown length, or an event stream): then
// each write goes out at once; otherwise net/http buffers as it likes.
func flushesEachWrite(resp *http.Response) bool {
	if resp.ContentLength == -1 {
		return true
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// copyBody copies an answer's body to w through a pooled buffer, flushing each write when asked;
// it returns the bytes written and the first read or write error. A bulk body (of known length,
// a MiB or more) is copied by copyBulk.
func copyBody(w http.ResponseWriter, body io.ReadCloser, flush, bulk bool) (int64, error) {
	if bulk && !flush {
		return copyBulk(w, body)
	}
	buf := copyBuffers.Get()
	defer copyBuffers.Put(buf)
	rc := http.NewResponseController(w)
	var n int64
	for {
		k, rerr := body.Read(buf)
		if k > 0 {
			m, werr := w.Write(buf[:k])
			n += int64(m)
			if werr != nil {
				return n, werr
			}
			if flush {
				if err := rc.Flush(); err != nil {
					return n, err
				}
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// readAhead is how many reads of a bulk body copyBulk may hold while the sandbox takes a write.
const readAhead = 8

// copyBulk copies a bulk body with its reads in a goroutine of their own, and each write taking
// everything read by then (up to bulkBuffer): a read returns one TLS record (16 KiB) and each
// write to the sandbox costs its framing (a chunked answer's, in TLS records of their own), so a
// fast body goes in large writes, while a slow one waits for nothing: a write never waits for a
// read that has not happened. When a write fails, body is closed so that a read under way
// ends: the reads are over when copyBulk returns, as the caller then reads the trailers.
func copyBulk(w io.Writer, body io.ReadCloser) (n int64, err error) {
	type chunk struct {
		b   []byte
		n   int
		err error
	}
	reads := make(chan chunk, readAhead)
	done, finished := make(chan struct{}), make(chan struct{})
	defer func() {
		close(done)
		if err != nil {
			body.Close()
		}
		<-finished
	}()
	go func() {
		defer close(finished)
		for {
			b := copyBuffers.Get()
			k, err := body.Read(b)
			select {
			case reads <- chunk{b, k, err}:
			case <-done:
				copyBuffers.Put(b)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	out := bulkBuffers.Get()
	defer bulkBuffers.Put(out)
	for {
		c := <-reads
		batch := append(out[:0], c.b[:c.n]...)
		copyBuffers.Put(c.b)
		rerr := c.err
		for rerr == nil && len(batch)+copyBuffer <= cap(out) {
			var more chunk
			select {
			case more = <-reads:
			default:
			}
			if more.b == nil {
				break
			}
			batch = append(batch, more.b[:more.n]...)
			copyBuffers.Put(more.b)
			rerr = more.err
		}
		if len(batch) > 0 {
			m, werr := w.Write(batch)
			n += int64(m)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// switchProtocols completes an upgrade the upstream accepted (101): the sandbox's connection is
// taken over (the framing check ends only here), the 101 goes to it, and bytes flow both ways
// until either side closes or the lease stops allowing the request (recheck), what the sandbox
// sends counted against its budget.
func (p *Proxy) switchProtocols(w http.ResponseWriter, r *http.Request, resp *http.Response, x *exchange) {
	fail := func(reason string) {
		resp.Body.Close()
		p.deny(w, x, refuse(http.StatusBadGateway, rule.UpstreamFailed, reason, ""))
	}
	if got := upgradeType(resp.Header); !strings.EqualFold(got, x.upgrade) {
		fail(fmt.Sprintf("upstream switched to %q when %q was asked for", got, x.upgrade))
		return
	}
	backend, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		fail("upstream's switched connection cannot be written to")
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		fail("the sandbox's connection cannot be taken over: " + err.Error())
		return
	}
	hijacked(conn)
	defer conn.Close()
	defer backend.Close()
	// The stream is the request, on: still held as the request (forward), closed now by closing
	// the connection it took over.
	x.held.switched(conn)
	resp.Body = nil // Write sends the head only
	if err := resp.Write(brw); err != nil || brw.Flush() != nil {
		return
	}
	x.status = resp.StatusCode
	var client net.Conn = conn
	if brw.Reader.Buffered() > 0 {
		client = &bufferedConn{Conn: conn, r: brw.Reader}
	}
	splice(x, conn, client, backend)
	p.record(x)
}

// splice relays bytes both ways between the client (written to conn, read from client, which
// may hold bytes buffered from conn) and the upstream until both sides are done, metering what
// goes up against the lease's budget. It sets the exchange's byte counts, and its refusal when
// the budget ran out mid-stream.
func splice(x *exchange, conn, client net.Conn, upstream io.ReadWriteCloser) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x.down, _ = io.Copy(conn, upstream)
		conn.Close()
	}()
	io.Copy(upstream, &meteredConn{Conn: client, m: x.meter})
	upstream.Close()
	wg.Wait()
	x.up = x.meter.n.Load()
	if over := x.meter.over.Load(); over != nil {
		x.refusal = over
	}
}
