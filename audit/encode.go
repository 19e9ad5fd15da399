package audit

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/rule"
)

// encoder writes records as JSON objects, fields in declaration order and empty ones left out,
// the way encoding/json would write a record of valid UTF-8. The trail is written with this one
// encoder and verified over the exact bytes it wrote, so the hash chain never depends on how any
// reader decodes or re-encodes a line. It is several times faster than reflection, which matters
// because every request and query writes a record.
//
// Any bytes can reach a record (a sandbox picks its paths and names, a tenant its file names), so
// the encoding is lossless: a field that is not valid UTF-8 is written with U+FFFD in place of
// each invalid byte, as encoding/json does, and its exact bytes go, base64-encoded, into the
// record's "raw" object, which Read puts back.
type encoder struct {
	b   []byte
	raw []rawField // fields of the record being written that are not valid UTF-8
	// The last record's time as text up to its seconds, and its zone: a record in the same
	// second of the same location reuses both and formats only its fraction (see appendTime).
	sec               int64
	loc               *time.Location
	secText, zoneText []byte
}

type rawField struct{ name, value string }

// appendJSON appends r as one JSON object (r.Raw is ignored: the encoder derives it).
func (e *encoder) appendJSON(b []byte, r *Record) []byte {
	e.b, e.raw = b, e.raw[:0]
	e.b = append(e.b, `{"time":"`...)
	e.appendTime(r.Time)
	e.b = append(e.b, `","kind":`...)
	e.text("kind", string(r.Kind))
	e.str("node", r.Node)
	e.str("tenant", r.Tenant)
	e.str("lease", r.Lease)
	e.str("task", r.Task)
	e.str("sandbox", r.Sandbox)
	e.str("source", r.Source)
	e.str("reviewer", r.Reviewer)
	e.str("decision", string(r.Decision))
	e.str("rule", string(r.Rule))
	e.str("reason", r.Reason)
	e.str("method", r.Method)
	e.str("host", r.Host)
	e.num("port", int64(r.Port))
	e.str("path", r.Path)
	e.str("credential", r.Credential)
	e.num("status", int64(r.Status))
	e.num("bytes_up", r.BytesUp)
	e.num("bytes_down", r.BytesDown)
	e.str("upstream", r.Upstream)
	e.str("dest", r.Dest)
	e.str("mirror", r.Mirror)
	e.str("qname", r.QName)
	e.str("qtype", r.QType)
	e.num("answers", int64(r.Answers))
	if r.Flagged {
		e.b = append(e.b, `,"flagged":true`...)
	}
	e.str("template", r.Template)
	e.str("runtime", r.Runtime)
	e.list("scopes", r.Scopes)
	e.str("event", string(r.Event))
	e.list("command", r.Command)
	if r.ExitCode != nil {
		e.b = append(e.b, `,"exit_code":`...)
		e.b = strconv.AppendInt(e.b, int64(*r.ExitCode), 10)
	}
	e.str("process", r.Process)
	e.stream("stdin", r.Stdin)
	e.stream("stdout", r.Stdout)
	e.stream("stderr", r.Stderr)
	e.str("sha256", r.SHA256)
	e.num("size", r.Size)
	e.str("to", r.To)
	if r.DurationMS != 0 {
		e.b = append(e.b, `,"duration_ms":`...)
		e.b = strconv.AppendFloat(e.b, r.DurationMS, 'f', -1, 64)
	}
	e.str("segment", r.Segment)
	if r.Through != 0 {
		e.b = append(e.b, `,"through":`...)
		e.b = strconv.AppendUint(e.b, r.Through, 10)
	}
	e.str("head", r.Head)
	e.str("note", r.Note)
	if len(e.raw) > 0 {
		e.b = append(e.b, `,"raw":{`...)
		for i, f := range e.raw {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = append(e.b, '"')
			e.b = append(e.b, f.name...)
			e.b = append(e.b, `":"`...)
			e.b = base64.StdEncoding.AppendEncode(e.b, []byte(f.value))
			e.b = append(e.b, '"')
		}
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, `,"seq":`...)
	e.b = strconv.AppendUint(e.b, r.Seq, 10)
	e.str("prev", r.Prev)
	e.str("hash", r.Hash)
	e.b = append(e.b, '}')
	return e.b
}

// appendTime appends t as t.AppendFormat(b, time.RFC3339Nano) does. That layout is the seconds
// text, the fraction with its trailing zeros (and, for none, its dot) dropped, and the zone, and
// the first and last are the same for every time in one second of one location, so they are
// formatted once per second.
func (e *encoder) appendTime(t time.Time) {
	if sec, loc := t.Unix(), t.Location(); sec != e.sec || loc != e.loc || e.secText == nil {
		e.sec, e.loc = sec, loc
		e.secText = t.AppendFormat(e.secText[:0], "2006-01-02T15:04:05")
		e.zoneText = t.AppendFormat(e.zoneText[:0], "Z07:00")
	}
	e.b = append(e.b, e.secText...)
	if ns := t.Nanosecond(); ns != 0 {
		var f [10]byte
		f[0] = '.'
		for i := 9; i > 0; i-- {
			f[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := len(f)
		for f[n-1] == '0' {
			n--
		}
		e.b = append(e.b, f[:n]...)
	}
	e.b = append(e.b, e.zoneText...)
}

// list appends a list of strings unless it is empty; an element that is not valid UTF-8 is kept
// in raw as "name.N".
func (e *encoder) list(name string, v []string) {
	if len(v) == 0 {
		return
	}
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, name...)
	e.b = append(e.b, `":[`...)
	for i, c := range v {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		if !e.appendString(c) {
			e.raw = append(e.raw, rawField{name + "." + strconv.Itoa(i), c})
		}
	}
	e.b = append(e.b, ']')
}

// stream appends a Stream object unless v is nil.
func (e *encoder) stream(name string, v *Stream) {
	if v == nil {
		return
	}
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, name...)
	e.b = append(e.b, `":{"size":`...)
	e.b = strconv.AppendInt(e.b, v.Size, 10)
	e.b = append(e.b, `,"sha256":`...)
	e.text(name+".sha256", v.SHA256)
	if v.Head != "" {
		e.b = append(e.b, `,"head":`...)
		e.text(name+".head", v.Head)
	}
	e.b = append(e.b, '}')
}

// str appends a string field unless v is empty.
func (e *encoder) str(name, v string) {
	if v == "" {
		return
	}
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, name...)
	e.b = append(e.b, '"', ':')
	e.text(name, v)
}

// text appends v as a JSON string, noting it in raw when it is not valid UTF-8.
func (e *encoder) text(name, v string) {
	if !e.appendString(v) {
		e.raw = append(e.raw, rawField{name, v})
	}
}

func (e *encoder) num(name string, v int64) {
	if v == 0 {
		return
	}
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, name...)
	e.b = append(e.b, '"', ':')
	e.b = strconv.AppendInt(e.b, v, 10)
}

const hexDigits = "0123456789abcdef"

// jsonPlain is true for the bytes appendString copies as they are: ASCII from space up, except
// the quote and the backslash.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendString appends s as a JSON string: quotes, backslashes, control characters, U+2028 and
// U+2029 escaped, invalid UTF-8 replaced with U+FFFD, as encoding/json does (without its HTML
// escaping). It reports whether s was valid UTF-8.
func (e *encoder) appendString(s string) (valid bool) {
	b := append(e.b, '"')
	// Most strings (names, rules, addresses) need no escape: one table lookup a byte finds the
	// first that does, and all before it is copied at once.
	i := 0
	for i < len(s) && jsonPlain[s[i]] {
		i++
	}
	if i == len(s) {
		b = append(b, s...)
		e.b = append(b, '"')
		return true
	}
	valid = true
	start := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			valid = false
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	e.b = append(b, '"')
	return valid
}

// restoreRaw puts the exact bytes recorded in r.Raw back into the fields they belong to. It
// leaves r.Raw as read, so a record passed on as JSON still carries them.
func (r *Record) restoreRaw() error {
	for name, enc := range r.Raw {
		v, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return fmt.Errorf("raw %q is not base64", name)
		}
		if !r.setText(name, string(v)) {
			return fmt.Errorf("raw %q names no text field", name)
		}
	}
	return nil
}

// setText sets the text field with JSON name name (or "command.N") to v.
func (r *Record) setText(name, v string) bool {
	var f *string
	switch name {
	case "kind":
		r.Kind = Kind(v)
		return true
	case "decision":
		r.Decision = Decision(v)
		return true
	case "node":
		f = &r.Node
	case "tenant":
		f = &r.Tenant
	case "lease":
		f = &r.Lease
	case "task":
		f = &r.Task
	case "sandbox":
		f = &r.Sandbox
	case "source":
		f = &r.Source
	case "reviewer":
		f = &r.Reviewer
	case "rule":
		r.Rule = rule.Rule(v)
		return true
	case "reason":
		f = &r.Reason
	case "method":
		f = &r.Method
	case "host":
		f = &r.Host
	case "path":
		f = &r.Path
	case "credential":
		f = &r.Credential
	case "upstream":
		f = &r.Upstream
	case "dest":
		f = &r.Dest
	case "mirror":
		f = &r.Mirror
	case "qname":
		f = &r.QName
	case "qtype":
		f = &r.QType
	case "event":
		r.Event = Event(v)
		return true
	case "sha256":
		f = &r.SHA256
	case "to":
		f = &r.To
	case "process":
		f = &r.Process
	case "stdin.head", "stdout.head", "stderr.head", "stdin.sha256", "stdout.sha256", "stderr.sha256":
		st := map[string]*Stream{"stdin": r.Stdin, "stdout": r.Stdout, "stderr": r.Stderr}[name[:strings.IndexByte(name, '.')]]
		if st == nil {
			return false
		}
		if strings.HasSuffix(name, ".head") {
			f = &st.Head
		} else {
			f = &st.SHA256
		}
	case "template":
		f = &r.Template
	case "runtime":
		f = &r.Runtime
	case "segment":
		f = &r.Segment
	case "head":
		f = &r.Head
	case "note":
		f = &r.Note
	case "prev":
		f = &r.Prev
	case "hash":
		f = &r.Hash
	default:
		list, i, ok := r.listElem(name)
		if !ok {
			return false
		}
		f = &list[i]
	}
	*f = v
	return true
}

// listElem finds the element a raw name "command.N" or "scopes.N" stands for.
func (r *Record) listElem(name string) ([]string, int, bool) {
	field, rest, ok := strings.Cut(name, ".")
	if !ok {
		return nil, 0, false
	}
	i, err := strconv.Atoi(rest)
	var list []string
	switch field {
	case "command":
		list = r.Command
	case "scopes":
		list = r.Scopes
	}
	if err != nil || i < 0 || i >= len(list) {
		return nil, 0, false
	}
	return list, i, true
}

// Line returns r as the trail writes it (without the newline): for a record read from the trail,
// exactly the bytes its hash covers, so whoever receives it can check the chain.
func Line(r *Record) []byte {
	return (&encoder{}).appendJSON(nil, r)
}
