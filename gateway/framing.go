package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"

	"github.com/airlock-dev/airlock/rule"
)

// framingConn checks the HTTP/1 framing of every request a client sends before net/http parses
// it, and refuses the shapes used for request smuggling that net/http would otherwise normalise
// silently: Content-Length together with Transfer-Encoding, obsolete line folding, and chunk
// sizes that are not hexadecimal. A refused connection gets a 400 naming the problem and is
// closed; the request never reaches the handler.
//
// It stops checking only when the connection has actually switched protocols: a CONNECT that
// was answered 200, an upgrade the upstream answered 101. Both take the connection over through
// Hijack, and hijacked (called by whoever hijacks) is the one thing that ends the checking. A
// request that merely asks to switch (a refused CONNECT, an Upgrade header the upstream ignored)
// leaves it on for the rest of the connection.
type framingConn struct {
	net.Conn
	onRefuse func(reason string)
	switched atomic.Bool // the connection no longer speaks HTTP/1

	mu     sync.Mutex
	state  framingState
	head   []byte // head bytes seen so far
	remain int64  // body bytes left (stateBody) or chunk bytes left (stateChunkData)
	line   []byte // partial chunk-size or trailer line
	// pending: the bytes read behind an undecided CONNECT (stateConnect), unchecked.
	pending []byte
	err     error
}

type framingState int

const (
	stateHead framingState = iota
	stateBody
	stateChunkSize
	stateChunkData
	stateChunkDataEnd
	stateTrailer
	// stateConnect: a CONNECT head was read and is not yet decided. What the client sent
	// behind it (a ClientHello, often, from clients that do not wait for the 200) is held in
	// pending unjudged: if the tunnel opens (hijacked) it is the tunnel's; if the connection
	// goes on as HTTP (a refused CONNECT), the server calls resume before it parses the next
	// request, and pending is checked then as requests.
	stateConnect
)

// maxHead bounds a request head; net/http's own limit (1 MiB) is larger, so ours decides.
const maxHead = 64 << 10

var errFraming = errors.New("request framing refused")

func newFramingConn(c net.Conn, onRefuse func(string)) *framingConn {
	return &framingConn{Conn: c, onRefuse: onRefuse}
}

// NetConn is the connection f checks the framing of.
func (f *framingConn) NetConn() net.Conn { return f.Conn }

func (f *framingConn) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.Conn.Read(p)
	if n > 0 && !f.switched.Load() {
		if reason := f.scan(p[:n]); reason != "" {
			f.refuse(reason)
			return 0, f.err
		}
	}
	return n, err
}

func (f *framingConn) refuse(reason string) {
	f.err = fmt.Errorf("%w: %s", errFraming, reason)
	refuse(http.StatusBadRequest, rule.BadRequest, reason, "").writeRaw(f.Conn)
	if f.onRefuse != nil {
		f.onRefuse(reason)
	}
}

// scan advances the framing state over b and returns a reason when the request is refused.
func (f *framingConn) scan(b []byte) string {
	for len(b) > 0 {
		switch f.state {
		case stateHead:
			f.head = append(f.head, b...)
			end, n := headEnd(f.head)
			if end < 0 {
				// Tolerate leading CRLFs, bound the rest.
				if len(f.head) > maxHead {
					return "request head larger than 64 KiB"
				}
				return ""
			}
			rest := f.head[end+n:]
			head := f.head[:end]
			b = append([]byte(nil), rest...)
			f.head = f.head[:0]
			if reason := f.startRequest(head); reason != "" {
				return reason
			}
		case stateConnect:
			f.pending = append(f.pending, b...)
			if len(f.pending) > maxHead {
				return "more than 64 KiB sent behind a CONNECT before its answer"
			}
			return ""
		case stateBody:
			n := min(int64(len(b)), f.remain)
			f.remain -= n
			b = b[n:]
			if f.remain == 0 {
				f.state = stateHead
			}
		case stateChunkSize, stateTrailer:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				f.line = append(f.line, b...)
				if len(f.line) > 4096 {
					return "chunk size line too long"
				}
				return ""
			}
			line := string(append(f.line, b[:i+1]...))
			f.line = f.line[:0]
			b = b[i+1:]
			if !strings.HasSuffix(line, "\r\n") {
				return "chunked body line not ended by CRLF"
			}
			line = strings.TrimSuffix(line, "\r\n")
			if f.state == stateTrailer {
				if line == "" {
					f.state = stateHead
				}
				continue
			}
			size, _, _ := strings.Cut(line, ";")
			n, err := strconv.ParseInt(size, 16, 64)
			if err != nil || n < 0 || size == "" || strings.ContainsAny(size, " \t+-xX") {
				return fmt.Sprintf("bad chunk size %q", truncate(line, 32))
			}
			if n == 0 {
				f.state = stateTrailer
			} else {
				f.state, f.remain = stateChunkData, n
			}
		case stateChunkData:
			n := min(int64(len(b)), f.remain)
			f.remain -= n
			b = b[n:]
			if f.remain == 0 {
				f.state, f.remain = stateChunkDataEnd, 2
			}
		case stateChunkDataEnd:
			// The CRLF after chunk data.
			for f.remain > 0 && len(b) > 0 {
				want := byte('\r')
				if f.remain == 1 {
					want = '\n'
				}
				if b[0] != want {
					return "chunk data not followed by CRLF"
				}
				b, f.remain = b[1:], f.remain-1
			}
			if f.remain == 0 {
				f.state = stateChunkSize
			}
		}
	}
	return ""
}

// headEnd finds the blank line that ends a request head in b, its lines ended as textproto
// ends them: by LF, a CR before it dropped (a head of bare LFs is read by net/http as any other,
// and must be checked as any other). It returns where the head's last line ends and the length
// of the blank line's end after it (LF, or CR LF), or -1: a head at b's start that is only blank
// lines (before a request, which net/http passes over or refuses) ends at its first.
func headEnd(b []byte) (int, int) {
	lf, crlf := bytes.Index(b, []byte("\n\n")), bytes.Index(b, []byte("\n\r\n"))
	switch {
	case lf < 0 && crlf < 0:
		return -1, 0
	case crlf < 0 || lf >= 0 && lf < crlf:
		return lf, 2
	default:
		return crlf, 3
	}
}

// startRequest checks one request head and sets up the framing of its body.
func (f *framingConn) startRequest(head []byte) string {
	head = bytes.TrimLeft(head, "\r\n")
	if len(head) == 0 {
		return "" // blank lines before a request, which net/http passes over or refuses
	}
	lines := strings.Split(string(head), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	method, target, _ := strings.Cut(lines[0], " ")
	_, proto, _ := strings.Cut(target, " ")
	var cls, tes, hosts []string
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			return "obsolete line folding in a header"
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return fmt.Sprintf("malformed header line %q", truncate(l, 32))
		}
		if strings.ContainsAny(name, " \t") {
			return fmt.Sprintf("white space in header name %q", truncate(name, 32))
		}
		switch strings.ToLower(name) {
		case "content-length":
			cls = append(cls, strings.TrimSpace(value))
		case "transfer-encoding":
			tes = append(tes, strings.TrimSpace(value))
		case "host":
			hosts = append(hosts, textproto.TrimString(value)) // as textproto reads it
		}
	}
	// What net/http's server required of Host beyond http.ReadRequest, which deletes the
	// header once it has read it (h1Server serves on after this): one, valid, and present in
	// every HTTP/1.1 request but a CONNECT, even one whose absolute-form target names its host.
	switch {
	case len(hosts) > 1:
		return "more than one Host header"
	case len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]):
		return fmt.Sprintf("malformed Host header %q", truncate(hosts[0], 32))
	case (len(hosts) == 0 || hosts[0] == "") && method != "CONNECT" && proto != "HTTP/1.0":
		return "missing required Host header"
	}
	switch {
	case len(cls) > 0 && len(tes) > 0:
		return "both Content-Length and Transfer-Encoding"
	case len(cls) > 1:
		return "more than one Content-Length"
	case len(tes) > 1 || (len(tes) == 1 && !strings.EqualFold(tes[0], "chunked")):
		return "Transfer-Encoding other than a single chunked"
	}
	f.state = stateHead
	switch {
	case method == "CONNECT":
		// A CONNECT has no body here: net/http would read one it declares, and a body this
		// check did not frame would hide the requests behind it from it. What follows is held
		// until the CONNECT is decided (stateConnect).
		if len(tes) > 0 || len(cls) == 1 && cls[0] != "0" {
			return "a CONNECT request with a body"
		}
		f.state = stateConnect
	case len(tes) == 1:
		f.state = stateChunkSize
	case len(cls) == 1:
		n, err := strconv.ParseInt(cls[0], 10, 64)
		if err != nil || n < 0 || strings.ContainsAny(cls[0], "+-") {
			return fmt.Sprintf("bad Content-Length %q", truncate(cls[0], 32))
		}
		if n > 0 {
			f.state, f.remain = stateBody, n
		}
	}
	return ""
}

// hijacked marks conn, if it is a framingConn, as switched to another protocol. Call it right
// after a successful Hijack that is followed by the switch (a CONNECT's 200, an upgrade's 101),
// before the answer that makes the switch is written.
func hijacked(conn net.Conn) {
	if f, ok := conn.(*framingConn); ok {
		f.switched.Store(true)
		f.mu.Lock()
		f.head, f.line, f.pending = nil, nil, nil
		f.mu.Unlock()
	}
}

// resumeFraming is called by the server before it parses each request on conn: when conn is a
// framingConn whose last request was a CONNECT that did not open a tunnel, the bytes read
// behind it are checked now, as requests, before any of them is parsed. A refusal is answered
// (a 400 naming it) and returned; the connection then serves nothing more.
func resumeFraming(conn net.Conn) error {
	f, ok := conn.(*framingConn)
	if !ok || f.switched.Load() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if f.state != stateConnect {
		return nil
	}
	b := f.pending
	f.state, f.pending = stateHead, nil
	if reason := f.scan(b); reason != "" {
		f.refuse(reason)
		return f.err
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// framingListener wraps every accepted connection in a framingConn.
type framingListener struct {
	net.Listener
	onRefuse func(remote net.Addr, reason string)
}

// NewFramingListener returns l with request framing checked on every connection (see
// framingConn); the gateway's listener for sandboxes must be wrapped in it.
func NewFramingListener(l net.Listener, onRefuse func(remote net.Addr, reason string)) net.Listener {
	return &framingListener{Listener: l, onRefuse: onRefuse}
}

func (l *framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	remote := c.RemoteAddr()
	return newFramingConn(c, func(reason string) {
		if l.onRefuse != nil {
			l.onRefuse(remote, reason)
		}
	}), nil
}
