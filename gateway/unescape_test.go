package gateway

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// escaper writes one character as one escape, and decode is a real parser of that escape
// (nil where the standard library has none).
type escaper struct {
	name   string
	ok     func(r rune) bool // which characters it can write; nil for all
	escape func(r rune) string
	decode func(s string) (string, error)
}

func unquoteJSON(s string) (string, error) {
	var out string
	err := json.Unmarshal([]byte(`"`+s+`"`), &out)
	return out, err
}

func unquoteC(s string) (string, error) { return strconv.Unquote(`"` + s + `"`) }

func unescapeXML(s string) (string, error) {
	var v struct {
		Text string `xml:",chardata"`
	}
	err := xml.Unmarshal([]byte("<a>"+s+"</a>"), &v)
	return v.Text, err
}

func unescapeHTML(s string) (string, error) { return html.UnescapeString(s), nil }

// unescapeHTMLInText reads s followed by a space, as a reference without ';' is in a page: the
// html package leaves "&#1" as it is at the very end of a string, where browsers do not.
func unescapeHTMLInText(s string) (string, error) {
	return strings.TrimSuffix(html.UnescapeString(s+" "), " "), nil
}

func isASCII(r rune) bool { return r < utf8.RuneSelf }
func isBMP(r rune) bool   { return r < 0x10000 }
func utf16Of(r rune) []int {
	return []int{int(0xD800 + (r-0x10000)>>10), int(0xDC00 + (r-0x10000)&0x3FF)}
}

var escapers = []escaper{
	{"html decimal", nil, func(r rune) string { return fmt.Sprintf("&#%d;", r) }, unescapeHTML},
	{"html decimal, leading zeros", nil, func(r rune) string { return fmt.Sprintf("&#0000000%d;", r) }, unescapeHTML},
	// The html package leaves a one-digit reference without ';' as it is (browsers read it).
	{"html decimal, no ;", func(r rune) bool { return r >= 10 }, func(r rune) string { return fmt.Sprintf("&#%d", r) }, unescapeHTMLInText},
	{"html hex", nil, func(r rune) string { return fmt.Sprintf("&#x%x;", r) }, unescapeHTML},
	{"html HEX", nil, func(r rune) string { return fmt.Sprintf("&#X%X;", r) }, unescapeHTML},
	{"html hex, leading zeros, no ;", nil, func(r rune) string { return fmt.Sprintf("&#x000%X", r) }, unescapeHTMLInText},
	{"xml decimal", func(r rune) bool { return r >= 0x20 }, func(r rune) string { return fmt.Sprintf("&#%d;", r) }, unescapeXML},
	{"xml hex", func(r rune) bool { return r >= 0x20 }, func(r rune) string { return fmt.Sprintf("&#x%04X;", r) }, unescapeXML},
	{"json \\u", isBMP, func(r rune) string { return fmt.Sprintf(`\u%04x`, r) }, unquoteJSON},
	{"json \\U", isBMP, func(r rune) string { return fmt.Sprintf(`\u%04X`, r) }, unquoteJSON},
	{"json surrogates", func(r rune) bool { return !isBMP(r) }, func(r rune) string {
		u := utf16Of(r)
		return fmt.Sprintf(`\u%04x\u%04X`, u[0], u[1])
	}, unquoteJSON},
	{"json short", func(r rune) bool { return strings.ContainsRune("\"\\/\b\f\n\r\t", r) }, func(r rune) string {
		return map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[r]
	}, unquoteJSON},
	{"percent", isASCII, func(r rune) string { return fmt.Sprintf("%%%02X", r) }, url.PathUnescape},
	{"percent, lower", isASCII, func(r rune) string { return fmt.Sprintf("%%%02x", r) }, url.PathUnescape},
	{"form +", func(r rune) bool { return r == ' ' }, func(rune) string { return "+" }, url.QueryUnescape},
	{"escape() %u", isBMP, func(r rune) string { return fmt.Sprintf("%%u%04X", r) }, nil},
	{"c \\x", isASCII, func(r rune) string { return fmt.Sprintf(`\x%02x`, r) }, unquoteC},
	{"c octal", isASCII, func(r rune) string { return fmt.Sprintf(`\%03o`, r) }, unquoteC},
	{"go \\u", isBMP, func(r rune) string { return fmt.Sprintf(`\u%04X`, r) }, unquoteC},
	{"python \\U", nil, func(r rune) string { return fmt.Sprintf(`\U%08x`, r) }, unquoteC},
	{"javascript \\u{}", nil, func(r rune) string { return fmt.Sprintf(`\u{%X}`, r) }, nil},
	{"javascript identity", func(r rune) bool { return strings.ContainsRune(`'"\/?$`, r) }, func(r rune) string { return `\` + string(r) }, nil},
	{"html hex, wrapped past 32 bits", nil, func(r rune) string { return fmt.Sprintf("&#x1%08X;", r) }, unescapeHTML},
	{"html decimal, wrapped past 32 bits", nil, func(r rune) string { return fmt.Sprintf("&#%d;", int64(r)+1<<32) }, unescapeHTML},
	{"javascript \\u{} with leading zeros", nil, func(r rune) string { return fmt.Sprintf(`\u{0000000%X}`, r) }, nil},
	{"css", nil, func(r rune) string { return fmt.Sprintf(`\%x `, r) }, nil},
	{"css, six digits", nil, func(r rune) string { return fmt.Sprintf(`\%06X`, r) }, nil},
	{"html named", func(r rune) bool { return namedFor(r) != "" }, func(r rune) string { return "&" + namedFor(r) + ";" }, unescapeHTML},
}

// namedFor is a name entities holds for r, if any.
func namedFor(r rune) string {
	for name, v := range entities {
		if v == string(r) {
			return name
		}
	}
	return ""
}

// TestReadingsAgreeWithParsers writes every ASCII character and some beyond in each escape the
// scrubber reads, checks that a real parser of that escape reads it back as the character, and
// that readings offers the character for the whole escape.
func TestReadingsAgreeWithParsers(t *testing.T) {
	var chars []rune
	for r := rune(1); r < utf8.RuneSelf; r++ {
		chars = append(chars, r)
	}
	chars = append(chars, 'é', '€', '\u2028', '😀')
	for _, e := range escapers {
		t.Run(e.name, func(t *testing.T) {
			tried := 0
			for _, r := range chars {
				if e.ok != nil && !e.ok(r) {
					continue
				}
				tried++
				esc := e.escape(r)
				if e.decode != nil {
					if got, err := e.decode(esc); err != nil || got != string(r) {
						t.Fatalf("the parser reads %q as %q (%v), want %q: the test's escape is wrong", esc, got, err, string(r))
					}
				}
				if !readsAs(esc, string(r)) {
					t.Errorf("%q (%U): no reading of the whole escape gives it", esc, r)
				}
			}
			if tried == 0 {
				t.Fatal("no character tried")
			}
		})
	}
}

// alphabetBreach says how a reading of b at j breaks what the scan rests on in passing over short
// stretches (scan.go, long), or "" when none does: each reading takes at least as many bytes as
// it reads as, each of them an escape byte or a byte of what it reads as; an escape cut by the
// end of b is escape bytes to the end.
func alphabetBreach(b []byte, j int) string {
	var as alts
	cut := readings(b, j, &as)
	for _, a := range as.a[:as.n] {
		took := b[j : j+a.took]
		if int(a.n) > a.took {
			return fmt.Sprintf("%q reads as %q, longer than itself", took, a.val[:a.n])
		}
		for _, c := range took {
			if !isEscapeByte(c) && !bytes.Contains(a.val[:a.n], []byte{c}) {
				return fmt.Sprintf("%q reads as %q, and holds %q, not an escape byte", took, a.val[:a.n], c)
			}
		}
	}
	if cut {
		for _, c := range b[j:] {
			if !isEscapeByte(c) {
				return fmt.Sprintf("%q is cut by the end and holds %q, not an escape byte", b[j:], c)
			}
		}
	}
	return ""
}

// TestReadingsStayInTheirAlphabet reads every escape of the escapers, whole, cut anywhere and
// followed by anything, and random texts of escape bytes, and checks alphabetBreach at each
// position: an escape written with a byte the scan does not count as one would be passed over
// in a stretch that looked too short to hold a form.
func TestReadingsStayInTheirAlphabet(t *testing.T) {
	var texts []string
	tails := []string{"", "z", "!", ";", " ", "\r\n", "\\u", "0", "\x00", "\xff"}
	for _, e := range escapers {
		for _, r := range []rune{'a', 'Z', '0', '+', '&', '\\', '%', ' ', 0x7f, 'é', '€', '😀', 0xD800} {
			if e.ok != nil && !e.ok(r) {
				continue
			}
			esc := e.escape(r)
			for k := 1; k <= len(esc); k++ {
				for _, tail := range tails {
					texts = append(texts, esc[:k]+tail)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"%", "&", "\\", "#", ";", "{", "}", "+", " ", "\t", "\n", "\r", "\f", "x", "X", "u", "U",
		"0", "00", "7", "9", "a", "f", "F", "D8", "DC", "amp", "lt", "fjlig", "plus", "quot", "nbsp", "!", "\x80", "\xff", "\x00"}
	for range 20000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			if rng.IntN(8) == 0 {
				b.WriteByte(byte(rng.Uint32()))
				continue
			}
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		for j := range len(text) {
			if why := alphabetBreach([]byte(text), j); why != "" {
				t.Fatalf("in %q at %d: %s", text, j, why)
			}
		}
	}
}

// FuzzReadingsStayInTheirAlphabet checks alphabetBreach at every position of any text.
func FuzzReadingsStayInTheirAlphabet(f *testing.F) {
	f.Add([]byte("&#x0000041;\\u{2b}%u00e9\\uD83D\\uDE00&fjlig;\\41 \\\r\n"))
	f.Add([]byte("&#0000"))
	f.Add([]byte("\\1F600"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for j := range b {
			if why := alphabetBreach(b, j); why != "" {
				t.Fatalf("in %q at %d: %s", b, j, why)
			}
		}
	})
}

// readsAs reports whether esc, read unit by unit from its start, can stand for want.
func readsAs(esc, want string) bool {
	m := matcher{b: []byte(esc)}
	end, ok, _ := m.read(0, []byte(want))
	return ok && end == len(esc)
}

// An escape cut by the end of a text is cut: what follows may read it another way, and a text
// that ends there ends inside whatever it began. An escape that has ended is not.
func TestReadingsAtTheEnd(t *testing.T) {
	for _, s := range []string{"%", "%2", "%u00", "&", "&#", "&#x", "&#00", "&#43", "&#x2b", "&pl", "&plus", "\\",
		"\\u00", "\\u{2", "\\u{0000", "\\x4", "\\U0000", "\\2b", "\\12", "\\ud83d", "\\ud83d\\u", "\\ud83d\\ude0", "\\2b\r", "\\\r"} {
		var as alts
		if cut := readings([]byte(s), 0, &as); !cut {
			t.Errorf("%q at the end of a text: not cut", s)
		}
	}
	for _, s := range []string{"%2B", "&#43;", "&plus;", "&amp ", "\\u002B", "\\x2b", "\\n", "+", "a", "\\ud83d\\ude00", "\\ud83dx"} {
		var as alts
		if cut := readings([]byte(s+"z"), 0, &as); cut {
			t.Errorf("%q followed by more text: cut", s)
		}
	}
}

// A line continued stands for nothing, and "&fjlig;" for two characters.
func TestReadingsOfNothingAndOfTwo(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"to\\\nken", "token"}, {"to\\\r\nken", "token"}, {"to\\\rken", "token"}, {"\\\nto\\\n\\\nken", "token"},
		{"&fjlig;", "fj"}, {"a&fjlig;b", "afjb"},
	} {
		if !readsAs(c.text, c.want) {
			t.Errorf("%q does not read as %q", c.text, c.want)
		}
	}
}

// What no parser reads as a character is not read as one: an escaped escape, an escape with no
// digits, a named reference that does not exist.
func TestReadingsRefuseWhatIsNotAnEscape(t *testing.T) {
	for _, c := range []struct{ text, not string }{
		{"&amp;#43;", "+"}, {"%252B", "+"}, {"&#;", "+"}, {"&#x;", "+"}, {"&plusx;", "+"}, {"\\\\u002B", "+"},
		{"%2", "+"}, {"&#43", "+3"}, {`\\x2b`, "+"},
	} {
		if readsAs(c.text, c.not) {
			t.Errorf("%q read as %q", c.text, c.not)
		}
	}
	// HTML reads &#128; as the euro sign (Windows-1252), XML as U+0080: both are offered.
	if !readsAs("&#128;", "€") || !readsAs("&#x80;", "€") {
		t.Error("HTML's reading of &#128; is not offered")
	}
}

// TestEntitiesAreHTMLs checks entities and legacyEntities against the html package's own table:
// every name that stands for one ASCII character is there, with that character, and nothing else.
func TestEntitiesAreHTMLs(t *testing.T) {
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), "src", "html", "entity.go"))
	if err != nil {
		t.Fatalf("reading the html package's table: %v", err)
	}
	one := regexp.MustCompile(`"([A-Za-z0-9]+)(;?)":\s*'\\U([0-9A-F]{8})'`)
	two := regexp.MustCompile(`"([A-Za-z0-9]+)(;?)":\s*\{'\\[uU]([0-9A-Fa-f]+)',\s*'\\[uU]([0-9A-Fa-f]+)'\}`)
	want, wantLegacy := map[string]string{}, map[string]string{}
	keep := func(name, semi string, runes ...string) {
		var text strings.Builder
		for _, h := range runes {
			v, _ := strconv.ParseUint(h, 16, 32)
			if v >= utf8.RuneSelf {
				return
			}
			text.WriteRune(rune(v))
		}
		if semi == ";" {
			want[name] = text.String()
		} else {
			wantLegacy[name] = text.String()
		}
	}
	for _, m := range one.FindAllStringSubmatch(string(src), -1) {
		keep(m[1], m[2], m[3])
	}
	for _, m := range two.FindAllStringSubmatch(string(src), -1) {
		keep(m[1], m[2], m[3], m[4])
	}
	if len(want) < 40 {
		t.Fatalf("read only %d names from the html package's table: has its format changed?", len(want))
	}
	for _, c := range []struct {
		ours, theirs map[string]string
		what         string
	}{{entities, want, "entities"}, {legacyEntities, wantLegacy, "legacyEntities"}} {
		for name, v := range c.theirs {
			if got, ok := c.ours[name]; !ok || got != v {
				t.Errorf("%s[%q] = %q, %v; html has %q", c.what, name, got, ok, v)
			}
		}
		for name := range c.ours {
			if _, ok := c.theirs[name]; !ok {
				t.Errorf("%s has %q, which html does not", c.what, name)
			}
			if len(name) > maxEntityName || c.what == "legacyEntities" && len(name) > maxLegacyName {
				t.Errorf("%s: %q is longer than its bound", c.what, name)
			}
		}
	}
}
