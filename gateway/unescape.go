package gateway

import (
	"html"
	"unicode/utf8"
)

// The escapes the parsers of common content types undo, read one unit at a time, so that the
// scrubber finds a credential however an upstream escaped it, one character in one way and the
// next in another. A unit is a byte as it is, or one escape:
//
//	%XX (either case), %uXXXX            URL percent-escapes; JavaScript's escape()
//	&#NNN; &#xHH; &#XHH;                  HTML and XML character references, any number of leading
//	                                      zeros, the ';' optional (HTML reads them without it), both
//	                                      HTML's reading of 0x80-0x9F (Windows-1252) and XML's, and
//	                                      the value Go's html packages read past 32 bits (it wraps)
//	&name; and &name                      HTML's named references for every ASCII character that has
//	                                      one, "fj" too (entities.go), and the legacy ones without ';'
//	\uXXXX, a surrogate pair of them      JSON and JavaScript
//	\" \\ \/ \' \X, \b \f \n \r \t \v \0  JSON's escapes, and the identity escapes of JavaScript
//	\xHH \u{H..} \UHHHHHHHH \NNN (octal)  JavaScript (any number of leading zeros), Python, C
//	\H.. (1 to 6 hex digits, one space)   CSS
//	\ and a line end                      a line continued (JavaScript, CSS, Python, C): nothing
//	+                                     a space, in form-encoded text
//
// Escapes are read one level deep, as one parser reads them: an escaped escape ("&amp;#43;",
// "%2526") is text to that parser, and a second decoder run on purpose is not covered.

// isIntroducer reports whether an escape can begin with c.
func isIntroducer(c byte) bool { return c == '%' || c == '&' || c == '\\' }

// isEscapeByte reports whether escapes are written with c: every byte a reading takes (below) is
// one of these or a byte of what it reads as (a byte as it is, and the X of "\X"), and so is
// every byte of an escape cut by the end of a text. A reading also takes at least as many bytes
// as it reads as. The scan rests on both (scan.go, long): TestReadingsStayInTheirAlphabet.
func isEscapeByte(c byte) bool {
	switch c {
	case '%', '&', '\\', '#', ';', '{', '}', '+', ' ', '\t', '\n', '\r', '\f':
		return true
	}
	return isAlnum(c)
}

// alt is one reading of the text at a position: the bytes it stands for (a byte, or a character
// in UTF-8) and how many bytes of the text it takes.
type alt struct {
	val  [utf8.UTFMax]byte
	n    int8
	took int
}

// maxAlts bounds the readings of one position: the byte as it is, and at most one of each kind
// of escape that can begin there.
const maxAlts = 12

// alts is the readings of one position.
type alts struct {
	a [maxAlts]alt
	n int
}

// char adds a reading as the character r, in UTF-8.
func (as *alts) char(r rune, took int) {
	if as.n < maxAlts {
		a := &as.a[as.n]
		a.n, a.took = int8(utf8.EncodeRune(a.val[:], r)), took
		as.n++
	}
}

// text adds a reading as the bytes of v: none, for what stands for nothing.
func (as *alts) text(v string, took int) {
	if as.n < maxAlts && len(v) <= utf8.UTFMax {
		as.a[as.n].n, as.a[as.n].took = int8(copy(as.a[as.n].val[:], v)), took
		as.n++
	}
}

// byte adds a reading as the byte c.
func (as *alts) byte(c byte, took int) {
	if as.n < maxAlts {
		as.a[as.n].val[0], as.a[as.n].n, as.a[as.n].took = c, 1, took
		as.n++
	}
}

// readings sets out to every way the text at b[j:] can be read as one unit, the byte as it is
// first. cut reports that b ends inside an escape that could go on: what follows may give the
// escape another reading, and a text that ends there ends inside whatever the escape began.
func readings(b []byte, j int, out *alts) (cut bool) {
	out.n = 0
	c := b[j]
	out.byte(c, 1)
	switch c {
	case '+':
		out.byte(' ', 1)
	case '%':
		cut = percentReadings(b, j, out)
	case '&':
		cut = referenceReadings(b, j, out)
	case '\\':
		cut = backslashReadings(b, j, out)
	}
	return cut
}

// percentReadings reads %XX and %uXXXX at b[j] (a '%').
func percentReadings(b []byte, j int, out *alts) (cut bool) {
	rest := b[j+1:]
	if len(rest) > 0 && (rest[0] == 'u' || rest[0] == 'U') {
		v, k := hexRun(rest[1:], 4)
		switch {
		case k == 4:
			out.char(utf16Rune(v), 6)
		case 1+k == len(rest):
			cut = true
		}
	}
	v, k := hexRun(rest, 2)
	switch {
	case k == 2:
		out.byte(byte(v), 3) // a byte: percent-escapes spell UTF-8 one byte at a time
	case k == len(rest):
		cut = true
	}
	return cut
}

// referenceReadings reads an HTML or XML character reference at b[j] (a '&').
func referenceReadings(b []byte, j int, out *alts) (cut bool) {
	i := j + 1
	if i == len(b) {
		return true
	}
	if b[i] != '#' {
		return namedReadings(b, j, out)
	}
	i++
	hex := false
	if i < len(b) && (b[i] == 'x' || b[i] == 'X') {
		hex = true
		i++
	}
	start := i
	for i < len(b) && b[i] == '0' {
		i++
	}
	sig := i
	// v is the value, or out of range past 8 digits; wrapped is the value in int32 arithmetic,
	// which overflows as the html packages of Go read it (&#x1000000NN; is U+00NN to them).
	v, wrapped := rune(0), int32(0)
	for ; i < len(b) && isDigit(b[i], hex); i++ {
		if i-sig < 8 {
			v = v*base(hex) + rune(hexVal(b[i]))
		}
		wrapped = wrapped*int32(base(hex)) + int32(hexVal(b[i]))
	}
	if i == len(b) {
		cut = true // more digits, or the ';', may follow
	}
	if i == start {
		return cut // "&#" or "&#x" with no digits is text
	}
	if i-sig > 8 {
		v = 0x110000
	}
	took := i - j
	if i < len(b) && b[i] == ';' {
		took++
	}
	out.char(xmlRune(v), took)
	if h := htmlRune(v, b[j:j+took]); h != xmlRune(v) {
		out.char(h, took)
	}
	if w := rune(wrapped); w != v && w > 0 && w <= utf8.MaxRune {
		out.char(w, took)
	}
	return cut
}

// namedReadings reads a named reference (&amp; &plus; &lt) at b[j] (a '&').
func namedReadings(b []byte, j int, out *alts) (cut bool) {
	i := j + 1
	for i < len(b) && i-j <= maxEntityName && isAlnum(b[i]) {
		i++
	}
	cut = i == len(b) // the name may go on, or its ';' come
	name := b[j+1 : i]
	if i < len(b) && b[i] == ';' {
		if v, ok := lookupEntity(&namedByLen, name); ok {
			out.text(v, i+1-j)
			return cut // the longest reading: HTML reads no shorter legacy name here
		}
	}
	// The legacy references are read without ';', as the longest that starts the name.
	for k := min(len(name), maxLegacyName); k >= 2; k-- {
		if v, ok := lookupEntity(&legacyByLen, name[:k]); ok {
			out.text(v, 1+k)
			break
		}
	}
	return cut
}

// namedEntity is one name of entities or legacyEntities and the text it stands for.
type namedEntity struct {
	name, text string
}

// namedByLen and legacyByLen hold entities and legacyEntities by the length of the name: a
// lookup compares a handful of names instead of hashing one, on every '&' of a page.
var namedByLen, legacyByLen = byLen(entities), byLen(legacyEntities)

func byLen(m map[string]string) (out [maxEntityName + 1][]namedEntity) {
	for name, v := range m {
		out[len(name)] = append(out[len(name)], namedEntity{name, v})
	}
	return out
}

func lookupEntity(t *[maxEntityName + 1][]namedEntity, name []byte) (string, bool) {
	if len(name) >= len(t) {
		return "", false
	}
	for _, e := range t[len(name)] {
		if e.name[0] == name[0] && e.name == string(name) {
			return e.text, true
		}
	}
	return "", false
}

// backslashReadings reads the escapes of JSON, JavaScript, Python, C and CSS at b[j] (a '\').
func backslashReadings(b []byte, j int, out *alts) (cut bool) {
	if j+1 == len(b) {
		return true
	}
	d := b[j+1]
	out.byte(d, 2) // \" \\ \/ \' and the identity escapes of JavaScript
	if c, ok := controlEscape(d); ok {
		out.byte(c, 2)
	}
	rest := b[j+2:]
	switch d {
	case '\n': // a line continued (JavaScript, CSS, Python, C): it stands for nothing
		out.text("", 2)
	case '\r':
		switch {
		case len(rest) > 0 && rest[0] == '\n':
			out.text("", 3)
		case len(rest) == 0:
			cut = true // "\r\n" is one line end
		}
		out.text("", 2)
	case 'u':
		if len(rest) > 0 && rest[0] == '{' { // \u{1F600}, any number of leading zeros
			z := 1
			for z < len(rest) && rest[z] == '0' {
				z++
			}
			v, k := hexRun(rest[z:], 6)
			switch {
			case z+k == len(rest):
				cut = true
			case (z > 1 || k > 0) && rest[z+k] == '}':
				out.char(v, 2+z+k+1)
			}
			break
		}
		v, k := hexRun(rest, 4)
		switch {
		case k == 4 && v >= 0xD800 && v < 0xDC00:
			// A high surrogate: with the low one after it, one character; alone, U+FFFD.
			if len(rest) >= 10 && rest[4] == '\\' && rest[5] == 'u' {
				if lo, k := hexRun(rest[6:], 4); k == 4 && lo >= 0xDC00 && lo < 0xE000 {
					out.char(0x10000+(v-0xD800)<<10+(lo-0xDC00), 12)
				}
			} else if lowMayFollow(rest[4:]) {
				cut = true
			}
			out.char(utf8.RuneError, 6)
		case k == 4:
			out.char(utf16Rune(v), 6)
		case k == len(rest):
			cut = true
		}
	case 'x':
		v, k := hexRun(rest, 2)
		switch {
		case k == 2:
			out.byte(byte(v), 4) // a byte in Python's and C's strings
			out.char(v, 4)       // a character in JavaScript's
		case k == len(rest):
			cut = true
		}
	case 'U':
		v, k := hexRun(rest, 8)
		switch {
		case k == 8:
			out.char(v, 10)
		case k == len(rest):
			cut = true
		}
	}
	if isDigit(d, true) { // CSS: one to six hex digits, then one optional white space
		v, k := hexRun(b[j+1:], 6)
		i := j + 1 + k
		switch {
		case i == len(b):
			cut = true
			out.char(v, i-j)
		case b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n':
			out.char(v, i+2-j)
		case b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r' || b[i] == '\f':
			cut = cut || b[i] == '\r' && i+1 == len(b) // "\r\n" counts as one
			out.char(v, i+1-j)
		default:
			out.char(v, i-j)
		}
	}
	if '0' <= d && d <= '7' { // octal, up to three digits and 0377
		v, k := rune(0), 0
		for k < 3 && j+1+k < len(b) && '0' <= b[j+1+k] && b[j+1+k] <= '7' && v*8+rune(b[j+1+k]-'0') <= 0377 {
			v = v*8 + rune(b[j+1+k]-'0')
			k++
		}
		cut = cut || j+1+k == len(b) && k < 3
		out.byte(byte(v), 1+k)
		out.char(v, 1+k)
	}
	return cut
}

// lowMayFollow reports whether tail, what follows a high surrogate's \uXXXX, is the start of
// the low surrogate's, cut by the end of the text.
func lowMayFollow(tail []byte) bool {
	if len(tail) >= 6 {
		return false
	}
	for i, c := range tail {
		switch {
		case i == 0 && c != '\\', i == 1 && c != 'u', i > 1 && !isDigit(c, true):
			return false
		}
	}
	return true
}

// controlEscape is the control character a one-letter escape of JSON, JavaScript and C stands
// for (\n and the like).
func controlEscape(d byte) (byte, bool) {
	switch d {
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case 'v':
		return '\v', true
	case '0':
		return 0, true
	case 'a':
		return '\a', true
	case 'e':
		return 0x1b, true
	}
	return 0, false
}

// hexRun reads up to max hex digits from the start of s: their value and how many there were.
func hexRun(s []byte, max int) (rune, int) {
	v, k := rune(0), 0
	for k < max && k < len(s) && isDigit(s[k], true) {
		v = v<<4 | rune(hexVal(s[k]))
		k++
	}
	return v, k
}

func isDigit(c byte, hex bool) bool {
	return '0' <= c && c <= '9' || hex && ('a' <= c && c <= 'f' || 'A' <= c && c <= 'F')
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func base(hex bool) rune {
	if hex {
		return 16
	}
	return 10
}

func hexVal(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// utf16Rune is the character one UTF-16 code unit stands for: a lone surrogate is U+FFFD.
func utf16Rune(v rune) rune {
	if v >= 0xD800 && v < 0xE000 {
		return utf8.RuneError
	}
	return v
}

// xmlRune is the character an XML reference to v stands for: out of range is U+FFFD.
func xmlRune(v rune) rune {
	if !utf8.ValidRune(v) {
		return utf8.RuneError
	}
	return v
}

// htmlRune is the character an HTML reference to v stands for, as HTML reads it (0 and out of
// range are U+FFFD, 0x80 to 0x9F are Windows-1252's): the rare ones are read by the html
// package itself, from the reference's own text.
func htmlRune(v rune, ref []byte) rune {
	if v == 0 || !utf8.ValidRune(v) {
		return utf8.RuneError
	}
	if v < 0x80 || v > 0x9F {
		return v
	}
	r, _ := utf8.DecodeRuneInString(html.UnescapeString(string(ref)))
	return r
}
