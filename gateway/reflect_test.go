package gateway

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// These tests play a sandbox that has an upstream reflect the credential the gateway injected,
// and try to get it back: escaped the way a content type's parser undoes, in pieces (ranges),
// or cut where the sandbox chose. Each reads what the sandbox got with real decoders and the
// test's own.

// mixedEscape is every escape the fuzzers below write, one at a time in any mix: the test's own
// decoder, written apart from the scrubber's.
var mixedEscape = regexp.MustCompile(`&#[xX]([0-9a-fA-F]+);?|&#([0-9]+);?|&[A-Za-z][A-Za-z0-9]*;|%[uU]([0-9a-fA-F]{4})|%([0-9a-fA-F]{2})|` +
	`\\u\{0*([0-9a-fA-F]{1,6})\}|\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})|\\x([0-9a-fA-F]{2})|\\([0-7]{3})|\\(?:\r\n|\r|\n)|\\(.)`)

// decodeMixed undoes every escape mixedEscape matches, left to right, one level deep.
func decodeMixed(s string) string {
	return mixedEscape.ReplaceAllStringFunc(s, func(m string) string {
		sub := mixedEscape.FindStringSubmatch(m)
		num := func(s string, base int) string {
			// As Go's html packages read a reference: in 32 bits, wrapping past them.
			var v uint32
			for _, d := range s {
				x, _ := strconv.ParseUint(string(d), 16, 8)
				v = v*uint32(base) + uint32(x)
			}
			if r := rune(int32(v)); r > 0 && r <= utf8.MaxRune {
				return string(r)
			}
			return "\uFFFD"
		}
		switch {
		case sub[1] != "":
			return num(sub[1], 16)
		case sub[2] != "":
			return num(sub[2], 10)
		case strings.HasPrefix(m, "&"):
			return html.UnescapeString(m)
		case sub[3] != "":
			return num(sub[3], 16)
		case sub[4] != "":
			v, _ := strconv.ParseUint(sub[4], 16, 8)
			return string([]byte{byte(v)})
		case sub[5] != "":
			return num(sub[5], 16)
		case sub[6] != "":
			return num(sub[6], 16)
		case sub[7] != "":
			return num(sub[7], 16)
		case sub[8] != "":
			return num(sub[8], 16)
		case sub[9] != "":
			return num(sub[9], 8)
		}
		if strings.HasPrefix(m, "\\") && strings.ContainsAny(m[1:2], "\r\n") {
			return "" // a line continued
		}
		if c, ok := map[string]string{"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}[sub[10]]; ok {
			return c
		}
		return sub[10]
	})
}

// readings is s as each decoder a sandbox could run reads it.
func decodings(s string) []string {
	out := []string{s, decodeMixed(s), html.UnescapeString(s)}
	if u, err := url.PathUnescape(s); err == nil {
		out = append(out, u)
	}
	if u, err := url.QueryUnescape(s); err == nil {
		out = append(out, u)
	}
	return out
}

// assertNoSecret fails when any decoding of got holds any of secrets.
func assertNoSecret(t testing.TB, got string, secrets ...string) {
	t.Helper()
	for _, d := range decodings(got) {
		for _, s := range secrets {
			if strings.Contains(d, s) {
				t.Fatalf("the sandbox can read %q from what it got:\n%q\ndecoded:\n%q", s, got, d)
			}
		}
	}
}

// escapeWith writes s with each byte escaped as plan says (a byte of plan per byte of s, cycled:
// 0 as it is, else one of unitEscapes, or, past them, the byte as it is after a line continued). A byte an escape begins with is always escaped, as a
// writer that escapes anything escapes it: as it is, it would begin an escape of what follows.
func escapeWith(s string, plan []byte) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		k := 0
		if len(plan) > 0 {
			k = int(plan[i%len(plan)]) % (len(unitEscapes) + 2)
		}
		if k == len(unitEscapes)+1 {
			b.WriteString([]string{"\\\n", "\\\r\n"}[i%2])
			k = 0
		}
		if k == 0 && isIntroducer(s[i]) {
			k = 1
		}
		if k == 0 {
			b.WriteByte(s[i])
			continue
		}
		b.WriteString(unitEscapes[k-1](s[i]))
	}
	return b.String()
}

var basicUserPass = testUser + ":" + testPassword

// basicSecrets are the values a sandbox could use, of a basic-auth credential.
var basicSecrets = []string{testPassword, basicUserPass, base64.StdEncoding.EncodeToString([]byte(basicUserPass))}

// TestReflectedEscapesScrubbed has the upstream write the injected header back as an HTML page,
// a JSON document and a form would, and in every escape, one character at a time, mixed.
func TestReflectedEscapesScrubbed(t *testing.T) {
	if !strings.Contains(testPassword, "+") {
		t.Fatalf("the basic credential's password must hold a '+' for the HTML case: %s", testPassword)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name    string
		reflect func(v string) string
	}{
		{"html page with + as &#43;", func(v string) string {
			return "<p>" + strings.ReplaceAll(html.EscapeString(v), "+", "&#43;") + "</p>"
		}},
		{"every character a hex reference with leading zeros", func(v string) string {
			var b strings.Builder
			for _, c := range []byte(v) {
				fmt.Fprintf(&b, "&#x000%X", c) // no ';': HTML reads it
				if c < 0x10 {
					b.WriteString(";")
				}
			}
			return b.String()
		}},
		{"named references", func(v string) string {
			return strings.NewReplacer("+", "&plus;", "/", "&sol;", "=", "&equals;", ":", "&colon;", "&", "&amp", "\"", "&QUOT;").Replace(v)
		}},
		{"json with every character \\u-escaped", func(v string) string {
			var b strings.Builder
			b.WriteString(`{"authorization":"`)
			for _, c := range []byte(v) {
				fmt.Fprintf(&b, `\u%04X`, c)
			}
			return b.String() + `"}`
		}},
		{"percent-escapes of mixed case", func(v string) string {
			var b strings.Builder
			for i, c := range []byte(v) {
				if i%2 == 0 {
					fmt.Fprintf(&b, "%%%02x", c)
				} else {
					fmt.Fprintf(&b, "%%%02X", c)
				}
			}
			return b.String()
		}},
		{"a different escape for each character", func(v string) string {
			plan := make([]byte, len(v))
			for i := range plan {
				plan[i] = byte(1 + rng.IntN(len(unitEscapes)))
			}
			return escapeWith(v, plan)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			withBasicEntry(t, h)
			var sent string
			h.answer(func(w http.ResponseWriter, r *http.Request) {
				_, p, _ := r.BasicAuth()
				sent = c.reflect(r.Header.Get("Authorization")) + "|" + c.reflect(p) + "|" + c.reflect(basicUserPass)
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("X-Echo", c.reflect(r.Header.Get("Authorization")))
				io.WriteString(w, sent)
			})
			resp, err := h.client().Get("https://api.example.test/basic/page")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, %v", resp.StatusCode, err)
			}
			// The reflection holds the credential for a parser of it: else the test proves nothing.
			if d := decodings(sent); !slicesContainSub(d, testPassword) {
				t.Fatalf("the upstream's reflection does not decode to the credential: %q", sent)
			}
			assertNoSecret(t, string(body)+resp.Header.Get("X-Echo"), basicSecrets...)
			if !strings.Contains(string(body), redacted) {
				t.Fatalf("nothing was redacted: %q", body)
			}
		})
	}
}

func slicesContainSub(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestRangeNeverSlicesACredential asks for the echo of the injected header 8 bytes at a time,
// as the sandbox would to get pieces no scrubbing recognises, and joins them.
func TestRangeNeverSlicesACredential(t *testing.T) {
	echo := func(h *harness) {
		h.answer(func(w http.ResponseWriter, r *http.Request) {
			for _, k := range rangeHeaders {
				if v := r.Header.Get(k); v != "" {
					w.Header().Add("X-Got-Range", k+": "+v)
				}
			}
			w.Header().Set("Content-Type", "text/plain")
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader("auth="+r.Header.Get("Authorization")+";"))
		})
	}
	t.Run("pieces joined", func(t *testing.T) {
		h := newHarness(t)
		echo(h)
		var joined strings.Builder
		for off := 0; off < 64; off += 8 {
			req, _ := http.NewRequest("GET", "https://api.example.test/v1/echo", nil)
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+7))
			req.Header.Set("If-Range", `"x"`)
			req.Header.Set("Request-Range", fmt.Sprintf("bytes=%d-%d", off, off+7))
			resp, err := h.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Got-Range") != "" {
				t.Fatalf("status %d, the upstream got %q: a request carrying a credential went with its range",
					resp.StatusCode, resp.Header.Get("X-Got-Range"))
			}
			joined.Write(body)
		}
		assertNoSecret(t, joined.String(), testSecret)
	})
	t.Run("an upstream that answers with a part anyway", func(t *testing.T) {
		for _, c := range []struct {
			name        string
			status      int
			contentType string
		}{
			{"206", http.StatusPartialContent, "text/plain"},
			{"byteranges in a 200", http.StatusOK, `multipart/byteranges; boundary="b"`},
			{"byteranges, odd spelling", http.StatusOK, "Multipart/ByteRanges;boundary=b"},
		} {
			t.Run(c.name, func(t *testing.T) {
				h := newHarness(t)
				h.answer(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", c.contentType)
					w.Header().Set("Content-Range", "bytes 0-7/64")
					w.WriteHeader(c.status)
					io.WriteString(w, r.Header.Get("Authorization")[7:15])
				})
				resp, err := h.client().Get("https://api.example.test/v1/part")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadGateway || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.Unscrubbable {
					t.Fatalf("status %d rule %q body %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), body)
				}
				if bytes.Contains(body, []byte(testSecret[:8])) {
					t.Fatalf("the refusal carries the piece: %q", body)
				}
				if rec := h.sink.last(); rec.Rule != rule.Unscrubbable || !strings.Contains(rec.Reason, "part of a body") {
					t.Fatalf("audit record %+v", rec)
				}
			})
		}
	})
	t.Run("without a credential, a range is the client's", func(t *testing.T) {
		h := newHarness(t)
		echo(h)
		h.mu.Lock()
		h.scopes = append([]scope.Scope{{Host: "api.example.test", Paths: []string{"/public/*"}}}, h.scopes...)
		h.mu.Unlock()
		req, _ := http.NewRequest("GET", "https://api.example.test/public/file", nil)
		req.Header.Set("Range", "bytes=0-3")
		resp, err := h.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusPartialContent || string(body) != "auth" {
			t.Fatalf("status %d body %q: a plain request's range must reach the upstream", resp.StatusCode, body)
		}
	})
}

// TestCutEchoGivesNoPrefix has the upstream cut its echo of the header after as many bytes as the
// sandbox asks, for every length: the sandbox never gets minForm bytes or more of the secret.
func TestCutEchoGivesNoPrefix(t *testing.T) {
	h := newHarness(t)
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("cut"))
		echo := "auth=" + r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Echo", echo[:min(n, len(echo))])
		io.WriteString(w, echo[:min(n, len(echo))])
	})
	learned := map[string]bool{}
	for n := range len("auth=Bearer ") + len(testSecret) + 1 {
		resp, err := h.client().Get(fmt.Sprintf("https://api.example.test/v1/cut?cut=%d", n))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, got := range []string{string(body), resp.Header.Get("X-Echo")} {
			rest, _ := strings.CutPrefix(got, "auth=Bearer ")
			learned[rest] = true
			if len(rest) >= minForm && strings.HasPrefix(testSecret, rest) {
				t.Fatalf("cut at %d: the sandbox got %q, %d bytes of the secret", n, got, len(rest))
			}
		}
	}
	for l := range learned {
		if len(l) >= minForm && strings.Contains(testSecret, l) {
			t.Fatalf("the sandbox learned %q", l)
		}
	}
}

// A cut-off start is redacted once it carries minForm bytes of the secret, and not before: a
// number that ends as the secret's hex begins is a number.
func TestCutOffStartNeedsItsBytes(t *testing.T) {
	s := newScrubber([]string{testSecret}, []string{"Bearer " + testSecret})
	hexOfSecret := fmt.Sprintf("%x", testSecret)
	b64 := base64.StdEncoding.EncodeToString([]byte(testSecret))
	for _, c := range []struct {
		text string
		cut  bool
	}{
		{"X-RateLimit-Reset: 17" + hexOfSecret[:4], false},
		{"1" + hexOfSecret[:7], false},
		{"1" + hexOfSecret[:8], true},
		{"1" + strings.ToUpper(hexOfSecret[:8]), true},
		{"tok " + testSecret[:3], false},
		{"tok " + testSecret[:4], true},
		{"tok " + html.EscapeString(testSecret[:2]) + "&#x" + fmt.Sprintf("%x", testSecret[2]) + ";" + testSecret[3:4], true},
		{"b64 " + b64[:5], false},
		{"b64 " + b64[:6], true},
		// Cut inside an escape: the text ends inside whatever the escape began.
		{"token=" + testSecret[:10] + "%3", true},
		{"token=" + testSecret[:10] + "&#x3", true},
		{"token=" + testSecret[:10] + "&#", true},
		{"token=" + testSecret[:10] + "&", true},
		{"token=" + testSecret[:10] + `\u00`, true},
		{"token=" + testSecret[:10] + `\u003`, true},
		{"token=" + testSecret[:10] + `\`, true},
		{"token=" + html.EscapeString(testSecret[:10]) + "&#x000000", true},
	} {
		out, _ := s.scrub([]byte(c.text))
		if got := strings.HasSuffix(string(out), redacted); got != c.cut {
			t.Errorf("%q scrubbed to %q: cut %v, want %v", c.text, out, got, c.cut)
		}
	}
}

// FuzzScrubEscapes reflects a secret, or the header written from it, with random characters in a
// random covered escape, between any text, and scrubs it whole and streamed: no decoding of
// what comes out holds the secret.
func FuzzScrubEscapes(f *testing.F) {
	f.Add("s3cr3t-value-0123456789", []byte{1, 0, 5, 9, 0, 12}, "<p>", "</p>", false, uint8(7))
	f.Add(`pa55/w+rd&"<q>=?%x`, []byte{3, 3, 0, 14, 15}, `{"a":"`, `"}`, true, uint8(1))
	f.Add("tok_abcDEF123", []byte{10, 11, 13}, "x=", "&y=2", true, uint8(32))
	f.Fuzz(func(t *testing.T, secret string, plan []byte, pre, post string, whole bool, piece uint8) {
		if len(secret) < 8 || len(secret) > 200 || strings.Contains(secret, redacted) {
			return
		}
		for i := 0; i < len(secret); i++ {
			if secret[i] < 0x21 || secret[i] > 0x7e {
				return // a credential is printable ASCII here; other bytes are read the same way
			}
		}
		written := "Bearer " + secret
		v := secret
		if whole {
			v = written
		}
		enc := escapeWith(v, plan)
		if got := decodeMixed(enc); got != v {
			t.Fatalf("the test's own decoder reads %q as %q, not %q", enc, got, v)
		}
		s := newScrubber([]string{secret}, []string{written})
		text := []byte(pre + enc + post)
		out, _ := s.scrub(text)
		assertNoSecret(t, string(out), secret)
		streamed, err := io.ReadAll(s.reader(io.NopCloser(&pieceReader{b: text, n: 1 + int(piece)%48}), nil))
		if err != nil || !bytes.Equal(streamed, out) {
			t.Fatalf("streamed in pieces of %d: %q (%v), whole: %q", 1+int(piece)%48, streamed, err, out)
		}
	})
}

// FuzzReflectingUpstream sends requests through the gateway to a real upstream that reflects the
// injected header with random characters in a random covered escape, in the body (flushed in
// pieces the fuzzer picks) and in a header.
func FuzzReflectingUpstream(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, "<html><body>", "</body></html>", uint8(5))
	f.Add([]byte{0, 0, 14}, `{"headers":{"Authorization":"`, `"}}`, uint8(0))
	f.Add([]byte{10}, "", "", uint8(1))
	h := newHarness(f)
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		plan, _ := base64.RawURLEncoding.DecodeString(r.URL.Query().Get("plan"))
		piece, _ := strconv.Atoi(r.URL.Query().Get("piece"))
		out := r.URL.Query().Get("pre") + escapeWith(r.Header.Get("Authorization"), plan) + r.URL.Query().Get("post")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("X-Echo", escapeWith(r.Header.Get("Authorization"), plan))
		for len(out) > 0 {
			k := min(len(out), 1+piece)
			io.WriteString(w, out[:k])
			w.(http.Flusher).Flush()
			out = out[k:]
		}
	})
	c := h.client()
	f.Fuzz(func(t *testing.T, plan []byte, pre, post string, piece uint8) {
		if !utf8.ValidString(pre) || !utf8.ValidString(post) || len(pre)+len(post) > 4096 {
			return
		}
		q := url.Values{"plan": {base64.RawURLEncoding.EncodeToString(plan)}, "pre": {pre}, "post": {post},
			"piece": {strconv.Itoa(int(piece) % 40)}}
		resp, err := c.Get("https://api.example.test/v1/reflect?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		assertNoSecret(t, string(body)+"\n"+resp.Header.Get("X-Echo"), testSecret)
	})
}
