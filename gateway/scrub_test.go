package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// withBasicEntry adds a basic-auth credential "basic" for api.example.test and a scope that
// uses it on /basic/*.
func withBasicEntry(t *testing.T, h *harness) {
	t.Helper()
	p := h.proxyHandler()
	catalog, err := broker.NewCatalog([]broker.Entry{{
		Name: "demo", Source: broker.Source{Kind: broker.SourceKV, Path: "demo"},
		Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "Bearer {{.token}}"},
		Hosts:  []string{"api.example.test"},
	}, {
		Name: "basic", Source: broker.Source{Kind: broker.SourceKV, Path: "basic"},
		Inject: broker.Injection{Kind: broker.InjectBasic}, Hosts: []string{"api.example.test"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p.Reload(catalog, p.dyn.Load().pins, nil, p.dyn.Load().budget)
	h.mu.Lock()
	h.scopes = append([]scope.Scope{{Host: "api.example.test", Credential: "basic", Paths: []string{"/basic/*"}}}, h.scopes...)
	h.mu.Unlock()
}

// Scrubbing covers every form the gateway itself produced, wherever the upstream puts it:
// headers, 1xx headers, trailers, and bodies of any content type, compressed ones included.
func TestScrubEveryForm(t *testing.T) {
	userpass := testUser + ":" + testPassword
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(userpass))
	embed := func(prefix, v string) string { // v inside a longer base64 text, at another alignment
		return base64.StdEncoding.EncodeToString([]byte(prefix + v + "trailing"))
	}
	jsonOf := func(v string) string { b, _ := json.Marshal(v); return string(b) }
	leaks := []string{testSecret, testPassword, userpass, basic, base64.StdEncoding.EncodeToString([]byte(userpass))}
	cases := []struct {
		name  string
		path  string
		serve http.HandlerFunc
	}{
		{"bearer echoed in a binary body", "/v1/bin", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			fmt.Fprintf(w, "\x00\x01%s\x02%s", r.Header.Get("Authorization"), embed("x", r.Header.Get("Authorization")))
		}},
		{"bearer in a body with no content type", "/v1/none", func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			io.WriteString(w, embed("ab", testSecret)+embed("abc", testSecret)+hexOf(testSecret))
		}},
		{"basic auth echoed whole and decoded", "/basic/echo", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			u, p, _ := r.BasicAuth()
			fmt.Fprintf(w, "%s|%s:%s|%s|%s|%s", r.Header.Get("Authorization"), u, p, embed("z", u+":"+p), embed("zz", p),
				jsonOf(p))
		}},
		{"escaped forms", "/basic/esc", func(w http.ResponseWriter, r *http.Request) {
			_, p, _ := r.BasicAuth()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"q":"%s","p":"%s","lower":"%s","j":%s}`, url.QueryEscape(p), url.PathEscape(p),
				strings.ToLower(url.QueryEscape(p)), strings.ReplaceAll(jsonOf(p), "/", `\/`))
		}},
		{"headers, header names and trailers", "/v1/hdr", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
			w.Header().Set("X-"+testSecret, "name")
			w.Header().Set("Trailer", "X-Declared, X-"+hexOf(testSecret))
			w.WriteHeader(200)
			io.WriteString(w, "body")
			w.Header().Set("X-Declared", testSecret)
			w.Header().Set(http.TrailerPrefix+"X-Undeclared", base64.StdEncoding.EncodeToString([]byte(testSecret)))
		}},
		{"early hints", "/v1/hints", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</x>; rel=preload; tok="+testSecret)
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "after hints")
		}},
		{"gzip body", "/v1/gz", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Type", "application/octet-stream")
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, "compressed %s", r.Header.Get("Authorization"))
			zw.Close()
		}},
		{"large streamed body", "/v1/big", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			for range 64 {
				io.WriteString(w, strings.Repeat("a", 1000)+testSecret)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			withBasicEntry(t, h)
			h.answer(c.serve)
			var hints []string
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, hdr textproto.MIMEHeader) error {
					hints = append(hints, fmt.Sprint(hdr))
					return nil
				}})
			req, _ := http.NewRequestWithContext(ctx, "GET", "https://api.example.test"+c.path, nil)
			resp, err := h.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d, err %v, body %q", resp.StatusCode, err, body)
			}
			seen := string(body) + fmt.Sprint(resp.Header) + fmt.Sprint(resp.Trailer) + strings.Join(hints, " ")
			for _, l := range leaks {
				for _, f := range newScrubber([]string{l}, nil).forms {
					if len(f.b) >= 8 && strings.Contains(seen, string(f.b)) {
						t.Fatalf("the sandbox saw %q (a form of %q):\n%s", f.b, l, seen)
					}
				}
			}
			if !strings.Contains(seen, redacted) {
				t.Fatalf("nothing was redacted: %s", seen)
			}
		})
	}
}

func hexOf(s string) string { return fmt.Sprintf("%x", s) }

// A response that cannot be scrubbed never reaches the sandbox when a credential was injected:
// a content coding the gateway cannot undo is refused, and an upgrade is refused before the
// credential goes out.
func TestUnscrubbableRefused(t *testing.T) {
	t.Run("brotli body", func(t *testing.T) {
		h := newHarness(t)
		h.answer(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "\x0b\x02"+r.Header.Get("Authorization"))
		})
		resp, err := h.client().Get("https://api.example.test/v1/br")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.Unscrubbable || bytes.Contains(body, []byte(testSecret)) {
			t.Fatalf("status %d rule %q body %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), body)
		}
		if rec := h.sink.last(); rec.Rule != rule.Unscrubbable {
			t.Fatalf("audit record %+v", rec)
		}
	})
	t.Run("websocket with a credential", func(t *testing.T) {
		h := newHarness(t)
		status, got := rawIntercepted(t, h, "GET /v1/ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\n"+
			"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		if status != http.StatusForbidden || got != rule.Unscrubbable {
			t.Fatalf("status %d rule %q", status, got)
		}
		if got := h.received(); len(got) > 0 || h.asked.Load() > 0 {
			t.Fatalf("the upgrade reached the upstream (%v) or the broker (%d)", got, h.asked.Load())
		}
	})
}

// BenchmarkScrub1MiB scrubs 1 MiB bodies holding no secret (the common case) for a basic-auth
// credential (every form of the password, user:password and the header value): text with no
// byte an escape begins with, an HTML page with references and escapes in it, random bytes.
func BenchmarkScrub1MiB(b *testing.B) {
	userpass := testUser + ":" + testPassword
	s := newScrubber([]string{testUser, testPassword}, []string{"Basic " + base64.StdEncoding.EncodeToString([]byte(userpass)), userpass})
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"text", bytes.Repeat([]byte("The quick brown fox jumps over the lazy dog; {\"k\": \"v\"} 0123456789\n"), 1<<20/67)},
		{"html", bytes.Repeat([]byte(`<a href="/q?a=1&amp;b=%20x">caf&eacute; &#8212; \u00e9</a> lorem ipsum dolor sit amet`+"\n"), 1<<20/83)},
		{"random", randomMiB()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				out, _ := io.Copy(io.Discard, s.reader(io.NopCloser(bytes.NewReader(c.body)), nil))
				if out != int64(len(c.body)) {
					b.Fatal(out)
				}
			}
			b.ReportMetric(float64(len(s.forms)), "forms")
		})
	}
}

// BenchmarkScrubHeldEscape reads an answer of a character reference whose leading zeros go on
// for 1000 KiB, 64 bytes at a time: it is held until it ends, and must not be read again from
// its start at every read.
func BenchmarkScrubHeldEscape(b *testing.B) {
	s := newScrubber([]string{testSecret}, []string{"Bearer " + testSecret})
	body := append(append([]byte(testSecret[:8]+"&#"), bytes.Repeat([]byte("0"), 1000<<10)...), fmt.Sprintf("%d;%s", testSecret[8], testSecret[9:])...)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		out, err := io.ReadAll(s.reader(io.NopCloser(&pieceReader{b: body, n: 64}), nil))
		if err != nil || string(out) != redacted {
			b.Fatalf("%v, ends %q", err, out[max(0, len(out)-20):])
		}
	}
}

// An escape held for longer than maxHeld cuts the answer; one that ends before is read whole.
func TestHeldEscape(t *testing.T) {
	s := newScrubber([]string{testSecret}, []string{"Bearer " + testSecret})
	zeros := func(n int) []byte {
		return append(append([]byte("x "+testSecret[:3]+"&#"), bytes.Repeat([]byte("0"), n)...), fmt.Sprintf("%d;%s y", testSecret[3], testSecret[4:])...)
	}
	out, err := io.ReadAll(s.reader(io.NopCloser(&pieceReader{b: zeros(300 << 10), n: 1000}), nil))
	if err != nil || string(out) != "x "+redacted+" y" {
		t.Fatalf("an escape of 300 KiB: %v, %q", err, out[:min(len(out), 40)])
	}
	if _, err := io.ReadAll(s.reader(io.NopCloser(&pieceReader{b: zeros(maxHeld + 1), n: 4096}), nil)); err != errHeld {
		t.Fatalf("an escape over maxHeld: %v, want the answer cut", err)
	}
}

// randomMiB is 1 MiB of random bytes, made once.
var randomMiB = sync.OnceValue(func() []byte {
	rng := rand.New(rand.NewPCG(5, 6))
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
})

// scrubEveryPosition is the reference the scan must agree with: at each position in turn, every
// form is read unit by unit; the longest found whole is replaced, or, where the text ends inside
// a secret's form read that far (minForm bytes or more), the rest of the text is.
func scrubEveryPosition(s *scrubber, b []byte) []byte {
	m := matcher{b: b}
	var out []byte
	for i := 0; i < len(b); {
		var best *form
		end, cut := 0, false
		for k := range s.forms {
			f := &s.forms[k]
			e, ok, ran := m.read(i, f.b)
			if ok && (best == nil || len(f.b) > len(best.b)) {
				best, end = f, e
			}
			if !ok && f.cut > 0 && ran >= f.cut {
				cut = true
			}
		}
		switch {
		case cut:
			return append(out, redacted...)
		case best != nil:
			out = append(out, best.repl...)
			i = end
		default:
			out = append(out, b[i])
			i++
		}
	}
	return out
}

// TestScrubSamplingFindsWhatEveryPositionFinds plants forms of short and long secrets at every
// offset, as they are and with random characters escaped, overlapping, adjacent, cut at the end
// and at chunk boundaries of a stream, and checks that the scan and the stream reader replace
// exactly what reading every position replaces.
func TestScrubSamplingFindsWhatEveryPositionFinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, secrets := range [][]string{{"abcd"}, {"s3cr3t"}, {"tok-0123456789abcdef0123456789abcdef"}, {"user", "hunter22"}, {"p%ss&w\rd"}} {
		s := newScrubber(secrets, []string{"Bearer " + secrets[0]})
		alphabet := []byte("abcdefs3cr3tok-0123456789%+/=Bearer \"\\&#;xu")
		for round := range 400 {
			var b []byte
			for len(b) < 200+round {
				if rng.IntN(4) == 0 {
					f := s.forms[rng.IntN(len(s.forms))].b
					if rng.IntN(3) == 0 {
						f = f[:rng.IntN(len(f))] // a form cut short must stay
					}
					if rng.IntN(2) == 0 {
						f = escapeSome(rng, f)
					}
					b = append(b, f...)
					continue
				}
				b = append(b, alphabet[rng.IntN(len(alphabet))])
			}
			want := scrubEveryPosition(s, b)
			got, _ := s.scrub(b)
			if !bytes.Equal(got, want) {
				t.Fatalf("secrets %q, input %q:\nscanned %q\nwant    %q", secrets, b, got, want)
			}
			streamed, err := io.ReadAll(s.reader(io.NopCloser(iotest.OneByteReader(bytes.NewReader(b))), nil))
			if err != nil || !bytes.Equal(streamed, want) {
				t.Fatalf("secrets %q, input %q read a byte at a time:\nstreamed %q (%v)\nwant     %q", secrets, b, streamed, err, want)
			}
		}
	}
}

// TestScrubPassingOverShortStretches plants forms, as they are, escaped and cut short, among
// random bytes, where most escapes lie in stretches of unit bytes too short to hold a form and
// are passed over: alone, fenced by bytes that are no unit byte, one byte short of a whole form,
// at the ends of the text and of a stream's reads. The scan and the stream reader must replace
// exactly what reading every position replaces, for secrets whose shortest form is long enough
// for the scan to probe for long stretches (probeShort) and for shorter ones.
func TestScrubPassingOverShortStretches(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, secrets := range [][]string{{"bench-credential-0123456789abcdef"}, {"s3cr3t-value-0123456789"}, {"abcd"}, {"hunter22"}, {"p%ss&w\rd"}, {"user", "pass word"}} {
		s := newScrubber(secrets, []string{"Bearer " + secrets[0]})
		var fences []byte
		for c := range s.unit {
			if !s.unit[c] {
				fences = append(fences, byte(c))
			}
		}
		for round := range 300 {
			var b []byte
			for len(b) < 100+4*round {
				switch rng.IntN(12) {
				case 0:
					f := s.forms[rng.IntN(len(s.forms))].b
					switch rng.IntN(4) {
					case 0:
						f = f[:len(f)-1]
					case 1:
						f = f[:rng.IntN(len(f))]
					}
					if rng.IntN(2) == 0 {
						f = escapeSome(rng, f)
					}
					// A line continued just before a form is not planted: the scan finds that form
					// where its bytes begin, after the "\\\n" that reads as nothing, and reading every
					// position from the '\\' (as b4b9ad8 did too); both replace the whole credential.
					fenced := rng.IntN(2) == 0 || bytes.HasSuffix(b, []byte("\\\n")) || bytes.HasSuffix(b, []byte("\\\r"))
					if fenced {
						b = append(b, fences[rng.IntN(len(fences))])
					}
					b = append(b, f...)
					if fenced {
						b = append(b, fences[rng.IntN(len(fences))])
					}
				case 1:
					b = append(b, "%&\\"[rng.IntN(3)])
				default:
					b = append(b, byte(rng.Uint32()))
				}
			}
			want := scrubEveryPosition(s, b)
			if got, _ := s.scrub(b); !bytes.Equal(got, want) {
				t.Fatalf("secrets %q, input %q:\nscanned %q\nwant    %q", secrets, b, got, want)
			}
			piece := 1 + rng.IntN(len(b))
			streamed, err := io.ReadAll(s.reader(io.NopCloser(&pieceReader{b: b, n: piece}), nil))
			if err != nil || !bytes.Equal(streamed, want) {
				t.Fatalf("secrets %q, input %q in pieces of %d:\nstreamed %q (%v)\nwant     %q", secrets, b, piece, streamed, err, want)
			}
		}
		if len(fences) == 0 {
			t.Fatalf("secrets %q: every byte is a unit byte, so no stretch is short", secrets)
		}
	}
}

// escapeSome writes some bytes of f in one of the escapes the scrubber reads.
func escapeSome(rng *rand.Rand, f []byte) []byte {
	var out []byte
	for _, c := range f {
		if rng.IntN(3) != 0 {
			out = append(out, c)
			continue
		}
		out = append(out, unitEscapes[rng.IntN(len(unitEscapes))](c)...)
	}
	return out
}

// unitEscapes write one ASCII byte as one escape, each unambiguous whatever follows it.
var unitEscapes = []func(c byte) string{
	func(c byte) string { return fmt.Sprintf("&#%d;", c) },
	func(c byte) string { return fmt.Sprintf("&#x%X;", c) },
	func(c byte) string { return fmt.Sprintf("&#X000%x;", c) },
	func(c byte) string { return fmt.Sprintf("&#00%d;", c) },
	func(c byte) string { return fmt.Sprintf(`\u%04x`, c) },
	func(c byte) string { return fmt.Sprintf(`\u%04X`, c) },
	func(c byte) string { return fmt.Sprintf(`\x%02x`, c) },
	func(c byte) string { return fmt.Sprintf(`\U%08X`, c) },
	func(c byte) string { return fmt.Sprintf(`\u{%x}`, c) },
	func(c byte) string { return fmt.Sprintf(`\u{000%x}`, c) },
	func(c byte) string { return fmt.Sprintf("&#x1%08X;", c) },
	func(c byte) string { return fmt.Sprintf("%%%02X", c) },
	func(c byte) string { return fmt.Sprintf("%%%02x", c) },
	func(c byte) string { return fmt.Sprintf("%%u%04X", c) },
	func(c byte) string { return fmt.Sprintf(`\%03o`, c) },
	func(c byte) string {
		if name := namedFor(rune(c)); name != "" {
			return "&" + name + ";"
		}
		return fmt.Sprintf("&#%d;", c)
	},
	func(c byte) string {
		if strings.IndexByte(`"\/'`, c) >= 0 {
			return `\` + string(c)
		}
		return fmt.Sprintf(`\u00%02x`, c)
	},
}

// FuzzScrubSampling checks the scan against reading every position, on any input, whole and
// streamed in pieces of any size.
func FuzzScrubSampling(f *testing.F) {
	f.Add([]byte("xx tok-0123456789abcdef Bearer tok-0123456789abcdef yy"), "tok-0123456789abcdef")
	f.Add([]byte("abcdabcd"), "abcd")
	f.Add([]byte("&#116;ok&#x2D;01\\u0032345 %74%6F%6b-0123 Bearer+tok-012345"), "tok-012345")
	f.Fuzz(func(t *testing.T, b []byte, secret string) {
		s := newScrubber([]string{secret}, []string{"Bearer " + secret})
		if s == nil {
			return
		}
		want := scrubEveryPosition(s, b)
		if got, _ := s.scrub(b); !bytes.Equal(got, want) {
			t.Fatalf("secret %q, input %q: scanned %q, want %q", secret, b, got, want)
		}
		piece := 1 + len(b)%61
		streamed, err := io.ReadAll(s.reader(io.NopCloser(&pieceReader{b: b, n: piece}), nil))
		if err != nil || !bytes.Equal(streamed, want) {
			t.Fatalf("secret %q, input %q in pieces of %d: streamed %q (%v), want %q", secret, b, piece, streamed, err, want)
		}
	})
}

// pieceReader reads b n bytes at a time.
type pieceReader struct {
	b []byte
	n int
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[k:]
	return k, nil
}
