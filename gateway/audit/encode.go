package audit

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendJSON appends r as a JSON object, fields in declaration order, empty ones left out, the
// way encoding/json would write it. The trail is written and verified with this one encoder, so
// the hash chain never depends on a library's formatting; it is several times faster than
// reflection, which matters because every request and query writes a record.
func appendJSON(b []byte, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	str := func(name, v string) {
		if v != "" {
			b = append(b, ',', '"')
			b = append(b, name...)
			b = append(b, '"', ':')
			b = appendString(b, v)
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			b = append(b, ',', '"')
			b = append(b, name...)
			b = append(b, '"', ':')
			b = strconv.AppendInt(b, v, 10)
		}
	}
	b = append(b, `,"kind":`...)
	b = appendString(b, string(r.Kind))
	str("node", r.Node)
	str("tenant", r.Tenant)
	str("lease", r.Lease)
	str("task", r.Task)
	str("sandbox", r.Sandbox)
	str("source", r.Source)
	str("decision", string(r.Decision))
	str("rule", r.Rule)
	str("reason", r.Reason)
	str("method", r.Method)
	str("host", r.Host)
	num("port", int64(r.Port))
	str("path", r.Path)
	str("credential", r.Credential)
	num("status", int64(r.Status))
	num("bytes_up", r.BytesUp)
	num("bytes_down", r.BytesDown)
	str("upstream", r.Upstream)
	str("qname", r.QName)
	str("qtype", r.QType)
	num("answers", int64(r.Answers))
	if r.Flagged {
		b = append(b, `,"flagged":true`...)
	}
	str("event", r.Event)
	if len(r.Command) > 0 {
		b = append(b, `,"command":[`...)
		for i, c := range r.Command {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, c)
		}
		b = append(b, ']')
	}
	if r.ExitCode != nil {
		b = append(b, `,"exit_code":`...)
		b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
	}
	str("sha256", r.SHA256)
	num("size", r.Size)
	if r.DurationMS != 0 {
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendFloat(b, r.DurationMS, 'f', -1, 64)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	str("prev", r.Prev)
	str("hash", r.Hash)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and control characters escaped,
// invalid UTF-8 replaced with U+FFFD, as encoding/json does (without its HTML escaping).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
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
	return append(b, '"')
}
