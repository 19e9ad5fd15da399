package gateway

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/rule"
)

const redacted = "[redacted]"

// minForm is the shortest form scrubbed: shorter ones would match by chance in ordinary bytes.
const minForm = 4

// scrubber finds every form in which an injected credential could come back in a response and
// replaces it with "[redacted]". The forms are derived from each secret value and from each
// value the gateway itself wrote into the request (the whole header value, the user:password of
// basic auth): the value itself; base64 in the standard and URL alphabets, padded and not, and at
// each of the three alignments it can have inside a longer base64 text; lower-case hex; URL query
// and path escaping (either case of the hex digits); and JSON string escaping (with and without
// HTML escaping, and with '/' escaped). A written value found as it is keeps its non-secret part
// ("Bearer [redacted]"), so a reader still sees what kind of credential went. Safe for
// concurrent use once built.
//
// Matching samples the text instead of probing every byte: every form is at least short bytes
// long, so any occurrence spans one of the positions short-3 apart that the scan looks at, and
// the four bytes there are one of the form's four-byte windows at offsets 0 to short-4. Those
// windows are kept in a bit filter (windows), so most samples cost one probe, and a text with
// no form in it is read at about one position in short-3 (one in 30 or so for a 32-character
// token); a sample that passes tries each start it could belong to, through the first-window
// filter and the table by first four bytes. Leftmost, then longest, forms are replaced, as a
// byte-by-byte scan would.
type scrubber struct {
	forms   []form
	buckets map[uint32][]form    // by their first four bytes, longest first
	filter  [1 << 16 / 64]uint64 // first four bytes of every form
	windows [1 << 16 / 64]uint64 // every form's four-byte windows at offsets 0 to short-4
	at      map[uint32][]window  // the same windows, by their four bytes
	short   int                  // the shortest form's length
	keep    int                  // the longest form minus one: what a stream must hold back
}

type form struct{ b, repl []byte }

// window is a form's four bytes at offset o.
type window struct {
	f form
	o int
}

// newScrubber builds the scrubber for the secret values and the values written into the
// request; nil when no value is long enough to scrub.
func newScrubber(secrets, written []string) *scrubber {
	s := &scrubber{buckets: map[uint32][]form{}}
	seen := map[string]bool{}
	add := func(f, repl string) {
		if len(f) >= minForm && !seen[f] {
			seen[f] = true
			s.forms = append(s.forms, form{[]byte(f), []byte(repl)})
		}
	}
	for _, v := range secrets {
		if len(v) >= minForm {
			for _, f := range derivedForms(v) {
				add(f, redacted)
			}
		}
	}
	// A written value found as it is keeps what of it is not secret; its encodings go whole.
	secretOnly := &scrubber{forms: s.forms}
	secretOnly.index()
	for _, v := range written {
		if len(v) < minForm {
			continue
		}
		repl := redacted
		if plain, found := secretOnly.scrub([]byte(v)); found {
			repl = string(plain)
		}
		add(v, repl)
		for _, f := range derivedForms(v)[1:] {
			add(f, redacted)
		}
	}
	if len(s.forms) == 0 {
		return nil
	}
	s.index()
	return s
}

// index fills the lookup tables from forms.
func (s *scrubber) index() {
	s.buckets, s.filter, s.windows, s.keep, s.short = map[uint32][]form{}, [1 << 16 / 64]uint64{}, [1 << 16 / 64]uint64{}, 0, 0
	for _, f := range s.forms {
		k := binary.LittleEndian.Uint32(f.b)
		s.buckets[k] = append(s.buckets[k], f)
		h := filterHash(k)
		s.filter[h/64] |= 1 << (h % 64)
		s.keep = max(s.keep, len(f.b)-1)
		if s.short == 0 || len(f.b) < s.short {
			s.short = len(f.b)
		}
	}
	s.at = map[uint32][]window{}
	for _, f := range s.forms {
		for o := 0; o+minForm <= s.short; o++ {
			k := binary.LittleEndian.Uint32(f.b[o:])
			h := filterHash(k)
			s.windows[h/64] |= 1 << (h % 64)
			s.at[k] = append(s.at[k], window{f, o})
		}
	}
	for k, fs := range s.buckets {
		slices.SortFunc(fs, func(a, b form) int { return len(b.b) - len(a.b) })
		s.buckets[k] = fs
	}
}

// derivedForms lists the encodings of v the scrubber looks for.
func derivedForms(v string) []string {
	b := []byte(v)
	out := []string{v, hex.EncodeToString(b)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		out = append(out, enc.EncodeToString(b))
		raw := enc.WithPadding(base64.NoPadding)
		for k := range 3 {
			// v preceded by k other bytes: drop the characters that mix in those bytes, and the
			// last one when it mixes in the bytes after v.
			e := raw.EncodeToString(append(make([]byte, k), b...))
			e = e[[3]int{0, 2, 3}[k]:]
			if (k+len(b))%3 != 0 {
				e = e[:len(e)-1]
			}
			if len(e) >= 6 || k == 0 { // short fragments would match by chance
				out = append(out, e)
			}
		}
	}
	for _, esc := range []string{url.QueryEscape(v), url.PathEscape(v)} {
		out = append(out, esc, lowerEscapes(esc))
	}
	var j bytes.Buffer
	enc := json.NewEncoder(&j)
	for _, html := range []bool{true, false} {
		j.Reset()
		enc.SetEscapeHTML(html)
		if enc.Encode(v) == nil {
			s := strings.TrimSuffix(j.String(), "\n")
			s = s[1 : len(s)-1]
			out = append(out, s, strings.ReplaceAll(s, "/", `\/`))
		}
	}
	return out
}

// lowerEscapes lower-cases the hex digits of percent-escapes.
func lowerEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerHex(b[i+1]), lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

func filterHash(k uint32) uint32 { return (k * 2654435761) >> 16 }

// match returns the longest form at the start of b, whose first four bytes are k, if any.
func (s *scrubber) match(b []byte, k uint32) (form, bool) {
	for _, f := range s.buckets[k] {
		if bytes.HasPrefix(b, f.b) {
			return f, true
		}
	}
	return form{}, false
}

// scrub returns b with every form replaced, and whether any was; b itself is returned when none
// was found.
func (s *scrubber) scrub(b []byte) ([]byte, bool) {
	if _, _, ok := s.next(b, 0); !ok {
		return b, false
	}
	out, _, _ := s.scrubFrom(make([]byte, 0, len(b)), b, true)
	return out, true
}

// scrubFrom appends to out the part of b that bytes after it cannot change, scrubbed, and
// returns how much of b that was: with final, all of it; else up to where a form starting later
// could still run past b's end (the last keep bytes, or the end of the last form replaced),
// so a stream cut anywhere is scrubbed exactly as the whole text would be.
func (s *scrubber) scrubFrom(out, b []byte, final bool) ([]byte, int, bool) {
	last, found := 0, false
	for i := 0; ; {
		p, f, ok := s.next(b, i)
		if !ok || !final && p+s.keep >= len(b) {
			break
		}
		found = true
		out = append(append(out, b[last:p]...), f.repl...)
		i = p + len(f.b)
		last = i
	}
	end := len(b)
	if !final {
		end = max(last, len(b)-s.keep)
	}
	return append(out, b[last:end]...), end, found
}

// next finds the leftmost form starting at i or after in b (the longest there), sampling every
// short-3 positions: a form starting at p covers the sample in [p, p+short-4] with one of its
// windows, so the first sample some form covers holds the leftmost form's start.
func (s *scrubber) next(b []byte, i int) (int, form, bool) {
	if len(s.forms) == 0 {
		return 0, form{}, false
	}
	span := s.short - minForm // how far before a sample a form covering it can start
	for j := i + span; j+minForm <= len(b); j += span + 1 {
		k := binary.LittleEndian.Uint32(b[j:])
		h := filterHash(k)
		if s.windows[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		start := -1
		for _, w := range s.at[k] {
			p := j - w.o
			if p >= i && (start < 0 || p < start) && bytes.HasPrefix(b[p:], w.f.b) {
				start = p
			}
		}
		if start >= 0 {
			f, _ := s.match(b[start:], binary.LittleEndian.Uint32(b[start:]))
			return start, f, true
		}
	}
	return 0, form{}, false
}

func (s *scrubber) scrubString(v string) string {
	b, found := s.scrub([]byte(v))
	if !found {
		return v
	}
	return string(b)
}

// scrubHeaders removes every form from h: values are scrubbed, and a header whose name holds
// one is dropped.
func (s *scrubber) scrubHeaders(h http.Header) {
	for k, vs := range h {
		if s.scrubString(k) != k {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = s.scrubString(v)
		}
	}
}

// scrubReader replaces forms in a stream, holding back just enough bytes at each read's end that
// a form split across reads is still caught. At the end of the body it scrubs trailers too
// (they are filled in by then).
type scrubReader struct {
	src      io.ReadCloser
	s        *scrubber
	trailers http.Header
	buf      []byte // read and not yet decided
	out      []byte // decided and not yet returned, in obuf
	obuf     []byte
	eof      bool
}

func (s *scrubber) reader(src io.ReadCloser, trailers http.Header) *scrubReader {
	return &scrubReader{src: src, s: s, trailers: trailers}
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		// Read straight into buf's free space, as much as the caller asks for at once.
		r.buf = slices.Grow(r.buf, max(len(p), 32<<10))
		n, err := r.src.Read(r.buf[len(r.buf):cap(r.buf)])
		r.buf = r.buf[:len(r.buf)+n]
		if err != nil && err != io.EOF {
			return 0, err
		}
		r.eof = err == io.EOF
		var used int
		r.obuf, used, _ = r.s.scrubFrom(r.obuf[:0], r.buf, r.eof)
		r.out = r.obuf
		r.buf = append(r.buf[:0], r.buf[used:]...)
		if r.eof {
			r.s.scrubHeaders(r.trailers)
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

func (r *scrubReader) Close() error { return r.src.Close() }

// decoded returns body with the content codings named in encoding undone, innermost last, for
// the codings the gateway can undo (gzip, x-gzip, deflate); ok is false for any other, which
// then cannot be scrubbed.
func decoded(body io.ReadCloser, encoding string) (io.ReadCloser, string, bool) {
	codings := strings.Split(encoding, ",")
	r := io.ReadCloser(body)
	for i := len(codings) - 1; i >= 0; i-- {
		c := strings.ToLower(strings.TrimSpace(codings[i]))
		switch c {
		case "", "identity":
		case "gzip", "x-gzip":
			r = &lazyGzip{src: r}
		case "deflate":
			r = &zlibOrFlate{src: r}
		default:
			return nil, c, false
		}
	}
	return r, "", true
}

// lazyGzip opens the gzip stream on first read, so a malformed one fails the body, not the
// response header.
type lazyGzip struct {
	src io.ReadCloser
	z   *gzip.Reader
	err error
}

func (l *lazyGzip) Read(p []byte) (int, error) {
	if l.z == nil && l.err == nil {
		l.z, l.err = gzip.NewReader(l.src)
		if l.err != nil {
			l.err = fmt.Errorf("upstream's gzip body: %w", l.err)
		}
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.z.Read(p)
}

func (l *lazyGzip) Close() error { return l.src.Close() }

// zlibOrFlate undoes "deflate", which servers send either zlib-wrapped (as RFC 9110 says) or
// raw: the first two bytes tell which.
type zlibOrFlate struct {
	src io.ReadCloser
	r   io.Reader
	err error
}

func (z *zlibOrFlate) Read(p []byte) (int, error) {
	if z.r == nil && z.err == nil {
		br := bufio.NewReader(z.src)
		hdr, _ := br.Peek(2)
		if len(hdr) == 2 && hdr[0]&0x0f == 8 && (uint16(hdr[0])<<8|uint16(hdr[1]))%31 == 0 {
			z.r, z.err = zlib.NewReader(br)
		} else {
			z.r = flate.NewReader(br)
		}
		if z.err != nil {
			z.err = fmt.Errorf("upstream's deflate body: %w", z.err)
		}
	}
	if z.err != nil {
		return 0, z.err
	}
	return z.r.Read(p)
}

func (z *zlibOrFlate) Close() error { return z.src.Close() }

// scrubbers keeps the scrubber built for each set of values, so requests with the same
// credential share one instead of deriving the forms again. Safe for concurrent use.
type scrubbers struct {
	mu sync.Mutex
	m  map[string]*scrubber
}

const maxScrubbers = 4096

func (c *scrubbers) of(secrets, written []string) *scrubber {
	secrets = slices.Clone(secrets)
	slices.Sort(secrets) // a Secret's values come in map order
	key := strings.Join(secrets, "\x00") + "\x01" + strings.Join(written, "\x00")
	c.mu.Lock()
	s, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return s
	}
	s = newScrubber(secrets, written)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxScrubbers {
		c.m = map[string]*scrubber{}
	}
	c.m[key] = s
	c.mu.Unlock()
	return s
}

// smallBody is the largest response body scrubbed in one piece; larger ones stream through the
// scrubbing reader.
const smallBody = 16 << 10

// scrubResponse scrubs every form of an injected credential from what the upstream sends back:
// headers (1xx ones in send, trailers in relay) and the body, whatever its type. A body in a
// content coding the gateway cannot undo, and a switch to another protocol, cannot be scrubbed,
// so they never carry a response to a request that had a credential.
func (p *Proxy) scrubResponse(resp *http.Response, x *exchange) error {
	if x.scrub == nil {
		return nil
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return refuse(http.StatusBadGateway, rule.Unscrubbable,
			fmt.Sprintf("the upstream switched protocols on a request that carried credential %q; an upgraded stream cannot be checked for it", x.entry.Name), "")
	}
	x.scrub.scrubHeaders(resp.Header)
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	if ce := resp.Header.Values("Content-Encoding"); len(ce) > 0 {
		body, coding, ok := decoded(resp.Body, strings.Join(ce, ","))
		if !ok {
			return refuse(http.StatusBadGateway, rule.Unscrubbable,
				fmt.Sprintf("upstream sent a %s-encoded body where credential %q was injected; it cannot be checked for the credential", coding, x.entry.Name),
				"the upstream should answer with identity encoding, which the gateway asks for")
		}
		// Sent on decoded: the sandbox gets the scrubbed plain bytes.
		resp.Body = body
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	if resp.ContentLength >= 0 && resp.ContentLength <= smallBody {
		// A small body of known length is scrubbed whole and keeps an exact Content-Length,
		// so it still goes out in one write (no chunking, no flush per write).
		b, err := io.ReadAll(io.LimitReader(resp.Body, smallBody+1))
		resp.Body.Close()
		if err != nil {
			return err
		}
		b, _ = x.scrub.scrub(b)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	resp.Body = x.scrub.reader(resp.Body, resp.Trailer)
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return nil
}
