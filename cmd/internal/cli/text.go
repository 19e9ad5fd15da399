package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ParseSince reads an RFC 3339 time or a duration back from now.
func ParseSince(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q is neither an RFC 3339 time nor a duration", v)
	}
	return time.Now().Add(-d), nil
}

// TerminalSafe escapes what a terminal would act on rather than show: control characters (C0,
// DEL, C1: escape sequences, carriage returns, newlines), bytes that are not UTF-8, and the
// invisible and direction-changing format characters that reorder what a line appears to say.
// Backslashes are escaped too, so an escape in the output always means one was made here.
func TerminalSafe(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == ' ' || (unicode.IsPrint(r) && r != utf8.RuneError):
			b.WriteRune(r)
		case r < 0x80:
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}
