package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/rule"
)

const redacted = "[redacted]"

// minForm is the shortest form scrubbed, and the shortest cut-off start of one: shorter ones
// would match by chance in ordinary bytes.
const minForm = 4

// scrubber finds every form in which an injected credential could come back in a response and
// replaces it with "[redacted]". Safe for concurrent use once built.
//
// The forms are derived from each secret value and from each value the gateway itself wrote
// into the request (the whole header value, the user:password of basic auth): the value itself;
// hex in either case; base64 in the standard and URL alphabets, padded and not, and at each of
// the three alignments it can have inside a longer base64 text; and, for a value with spaces,
// the value with '+' for them. A written value found as it is keeps its non-secret part
// ("Bearer [redacted]"), so a reader still sees what kind of credential went.
//
// Each byte of a form is found as it is or in any escape the parsers of common content types
// undo (unescape.go: URL percent-escapes, HTML and XML character references, JSON, JavaScript,
// Python and CSS escapes), one byte in one way and the next in another, so an upstream that
// reflects the credential with "+" as "&#43;" or every character as "\u00XX" gives nothing
// away. A text that ends inside a form derived from a secret has that cut-off start redacted
// too, once it carries minForm bytes of the secret: an upstream that cuts its answer where the
// sandbox chose would otherwise hand out the credential a prefix at a time.
//
// Matching samples the text instead of reading every byte (scan.go): forms as they are through
// four-byte windows of the text, forms holding an escape only near a byte an escape begins
// with ('%', '&', '\'). Leftmost, then longest, forms are replaced, as a byte-by-byte scan
// would.
type scrubber struct {
	forms   []form
	buckets map[uint32][]form    // by their first four bytes, longest first
	filter  [1 << 16 / 64]uint64 // first four bytes of every form
	windows [1 << 16 / 64]uint64 // every form's four-byte windows at offsets 0 to short-4
	at      map[uint32][]window  // the same windows, by their four bytes
	first   [256][]form          // by their first byte, longest first: where reading unit by unit starts
	pos     [256][]formAt        // every byte of every form, by the byte
	pairs   pairSet              // every two bytes in a row in a form
	// unit marks the bytes a form's text is made of, as it is or escaped: the forms' own bytes
	// and those escapes are written with (isEscapeByte). A form holding an escape lies in a
	// stretch of them at least short long, so escapes in shorter stretches are passed over.
	unit  [256]bool
	short int // the shortest form's length
	keep  int // the longest form minus one: what a stream must hold back
}

// form is one form of a value and what replaces it. A form derived from a secret (not a written
// value) also has a cut-off start of it redacted at the end of a text, once that start is cut
// bytes long: as many as carry minForm bytes of the secret in its encoding.
type form struct {
	b, repl []byte
	cut     int // zero: a cut-off start is not redacted
}

// formAt is the byte at offset k of forms[f].
type formAt struct{ f, k int32 }

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
	add := func(d derived, repl string, cut int) {
		for _, v := range spaceVariants(d.f) {
			if len(v) >= minForm && !seen[v] {
				seen[v] = true
				s.forms = append(s.forms, form{[]byte(v), []byte(repl), cut})
			}
		}
	}
	for _, v := range secrets {
		if len(v) >= minForm {
			for _, d := range derivedForms(v) {
				add(d, redacted, d.cut)
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
		add(derived{f: v}, repl, 0)
		for _, d := range derivedForms(v)[1:] {
			add(d, redacted, 0)
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
	s.buckets, s.filter, s.windows, s.first, s.pos, s.pairs, s.keep, s.short = map[uint32][]form{}, [1 << 16 / 64]uint64{}, [1 << 16 / 64]uint64{}, [256][]form{}, [256][]formAt{}, pairSet{}, 0, 0
	for c := range s.unit {
		s.unit[c] = isEscapeByte(byte(c))
	}
	for i, f := range s.forms {
		for k, c := range f.b {
			s.unit[c] = true
			s.pos[c] = append(s.pos[c], formAt{int32(i), int32(k)})
			if k > 0 {
				s.pairs.add(f.b[k-1], c)
			}
		}
		k := binary.LittleEndian.Uint32(f.b)
		s.buckets[k] = append(s.buckets[k], f)
		h := filterHash(k)
		s.filter[h/64] |= 1 << (h % 64)
		s.first[f.b[0]] = append(s.first[f.b[0]], f)
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
	longestFirst := func(a, b form) int { return len(b.b) - len(a.b) }
	for k, fs := range s.buckets {
		slices.SortFunc(fs, longestFirst)
		s.buckets[k] = fs
	}
	for _, fs := range s.first {
		slices.SortFunc(fs, longestFirst)
	}
}

// derivedForms lists the encodings of v the scrubber looks for, v itself first. Escaped forms
// (URL, JSON, HTML) are not listed: the scan reads escapes wherever they are.
func derivedForms(v string) []derived {
	b := []byte(v)
	lower := hex.EncodeToString(b)
	// A cut-off start is redacted once it carries minForm bytes: minForm characters of the value,
	// twice as many hex digits, a third more base64 characters. Fewer would put "Content-Length:
	// 17333" (the hex of "s3...") under suspicion; the sandbox learns at most the bytes below.
	hexCut, b64Cut := 2*minForm, (minForm*4+2)/3
	out := []derived{{v, minForm}, {lower, hexCut}, {strings.ToUpper(lower), hexCut}}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		out = append(out, derived{enc.EncodeToString(b), b64Cut})
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
				out = append(out, derived{e, b64Cut})
			}
		}
	}
	return out
}

// derived is one encoding of a value, and the length of a cut-off start of it that gives away
// minForm bytes of the value.
type derived struct {
	f   string
	cut int
}

// maxSpaceVariants bounds the spaces of a value whose every mix of ' ' and '+' is a form; a
// value with more has two: as it is, and with '+' for every space.
const maxSpaceVariants = 3

// spaceVariants is f, and f with '+' for some or all of its spaces: form encoding writes a space
// as '+', and a mix of the two still decodes to f. (A '+' in a text with an escape in it is read
// as a space where a form needs one: scan.go.)
func spaceVariants(f string) []string {
	n := strings.Count(f, " ")
	if n == 0 {
		return []string{f}
	}
	if n > maxSpaceVariants {
		return []string{f, strings.ReplaceAll(f, " ", "+")}
	}
	out := make([]string, 0, 1<<n)
	for mask := range 1 << n {
		b, k := []byte(f), 0
		for i, c := range b {
			if c == ' ' {
				if mask&(1<<k) != 0 {
					b[i] = '+'
				}
				k++
			}
		}
		out = append(out, string(b))
	}
	return out
}

func filterHash(k uint32) uint32 { return (k * 2654435761) >> 16 }

// scrub returns b with every form replaced, and whether any was; b itself is returned when none
// was found.
func (s *scrubber) scrub(b []byte) ([]byte, bool) {
	sc := s.scan(b, true)
	ev, ok := sc.next(0, sc.limit)
	if !ok {
		return b, false
	}
	out, _, _ := sc.run(make([]byte, 0, len(b)), ev, ok)
	return out, true
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

// maxHeld bounds what a stream holds back undecided: an escape that is still going on (leading
// zeros have no end) cannot be held for ever, so an answer that needs more is cut.
const maxHeld = 1 << 20

// errHeld cuts an answer whose undecided part grew past maxHeld.
var errHeld = fmt.Errorf("the upstream's answer holds an escape over %d bytes long, which could hide a credential", maxHeld)

// scrubReader replaces forms in a stream, holding back just enough bytes at each read's end that
// a form split across reads is still caught. At the end of the body it scrubs trailers too
// (they are filled in by then).
type scrubReader struct {
	src      io.ReadCloser
	s        *scrubber
	trailers http.Header
	buf      []byte // read; from done on, not yet decided
	done     int
	out      []byte // decided and not yet returned: in obuf, or buf[:done] when it held no form
	obuf     []byte
	eof      bool
	// wait is how long buf grows before it is scanned again, once a scan decided none of it:
	// an escape that goes on (leading zeros have no end) would otherwise be read again from its
	// start at every read, a scan quadratic in its length.
	wait int
}

func (s *scrubber) reader(src io.ReadCloser, trailers http.Header) *scrubReader {
	return &scrubReader{src: src, s: s, trailers: trailers}
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		if r.done > 0 {
			r.buf, r.done = append(r.buf[:0], r.buf[r.done:]...), 0
		}
		// Read straight into buf's free space, as much as the caller asks for at once.
		r.buf = slices.Grow(r.buf, max(len(p), 32<<10))
		n, err := r.src.Read(r.buf[len(r.buf):cap(r.buf)])
		r.buf = r.buf[:len(r.buf)+n]
		if err != nil && err != io.EOF {
			return 0, err
		}
		r.eof = err == io.EOF
		if len(r.buf)-n > maxHeld {
			return 0, errHeld // what was held before this read: a read may be of any size
		}
		if !r.eof && len(r.buf) < r.wait {
			continue
		}
		used := r.decide()
		r.wait = 0
		if used == 0 && len(r.buf) > 2*r.s.keep {
			r.wait = 2 * len(r.buf) // held for an escape that goes on: scan again at twice this
		}
		if r.eof {
			r.s.scrubHeaders(r.trailers)
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// decide scrubs what of buf bytes after it cannot change into out, and returns how much of buf
// that was: at the end of the body, all of it; else up to where a form starting later could
// still run past buf's end (the last keep bytes, an escape buf ends in, or the end of the last
// form replaced), so a stream cut anywhere is scrubbed exactly as the whole text would be.
// Where that part holds no form, out is that part of buf itself, not a copy of it: the common
// case of a bulk body.
func (r *scrubReader) decide() int {
	sc := r.s.scan(r.buf, r.eof)
	ev, ok := sc.next(0, sc.limit)
	if !ok {
		r.done = sc.limit
		r.out = r.buf[:r.done]
		return r.done
	}
	var used int
	r.obuf, used, _ = sc.run(r.obuf[:0], ev, ok)
	r.out = r.obuf
	r.done = used
	return used
}

func (r *scrubReader) Close() error { return r.src.Close() }

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

// isPartial reports whether resp is a part of a body: a 206, or byte ranges whatever the status
// (any Content-Type naming them, parameters and odd spellings included).
func isPartial(resp *http.Response) bool {
	if resp.StatusCode == http.StatusPartialContent {
		return true
	}
	for _, ct := range resp.Header.Values("Content-Type") {
		if strings.Contains(strings.ToLower(ct), "byteranges") {
			return true
		}
	}
	return false
}

// smallBody is the largest response body scrubbed in one piece; larger ones stream through the
// scrubbing reader.
const smallBody = 16 << 10

// scrubResponse scrubs every form of an injected credential from what the upstream sends back:
// headers (1xx ones in send, trailers in relay) and the body, whatever its type. A body in a
// content coding the gateway cannot undo, and a switch to another protocol, cannot be scrubbed,
// so they never carry a response to a request that had a credential.
func (p *Proxy) scrubResponse(resp *http.Response, x *exchange) error {
	if x.entry != nil && isPartial(resp) {
		return refuse(http.StatusBadGateway, rule.Unscrubbable,
			fmt.Sprintf("the upstream answered with part of a body (%d, %s) to a request that carried credential %q; a part can hold a piece of the credential that no scrubbing recognises",
				resp.StatusCode, resp.Header.Get("Content-Type"), x.entry.Name),
			"ask for the whole body: the gateway does not send Range on a request that carries a credential")
	}
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
