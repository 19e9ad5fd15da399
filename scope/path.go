package scope

import (
	"errors"
	"strconv"
	"strings"
)

// ErrPath is wrapped by every error CheckPath returns.
var ErrPath = errors.New("request path refused")

// CheckPath says why p, a request path in its wire form (percent-encoded, as it is sent
// upstream), cannot be matched against path scopes; nil means it can.
//
// Paths are matched exactly as they are sent, never after decoding or cleaning, so what a scope
// checked is byte for byte what the upstream receives. That only holds if the upstream cannot
// read the path as a different one, so every form that servers resolve differently is refused:
// an empty path, dot segments ("." and "..", also before a ";" parameter as some servers read
// them), empty segments ("//"), a backslash, the percent-encoded '/', '.', '\' and NUL, and
// double percent-encoding (a path that still holds a percent-escape once decoded), which
// upstreams that decode twice would turn into any of those.
func CheckPath(p string) error {
	switch {
	case p == "":
		return pathError("the path is empty (send at least /)")
	case p[0] != '/':
		return pathError("the path does not start with /")
	case strings.Contains(p, "//"):
		return pathError("the path has an empty segment (//)")
	case strings.ContainsRune(p, '\\'):
		return pathError("the path holds a backslash")
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		name, _, _ := strings.Cut(seg, ";")
		if name == "." || name == ".." {
			return pathError("the path has a dot segment (" + seg + ")")
		}
	}
	// One decoding pass: what a server that decodes once sees.
	var once []byte
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			if once != nil {
				once = append(once, p[i])
			}
			continue
		}
		if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			return pathError("the path has a malformed percent-escape")
		}
		c := unhex(p[i+1])<<4 | unhex(p[i+2])
		switch c {
		case '/', '.', '\\', 0:
			return pathError("the path holds a percent-encoded '/', '.', '\\' or NUL (" + p[i:i+3] + ")")
		}
		if once == nil {
			once = append(make([]byte, 0, len(p)), p[:i]...)
		}
		once = append(once, c)
		i += 2
	}
	// A server that decodes again must find nothing left to decode.
	for i := 0; i+2 < len(once); i++ {
		if once[i] == '%' && isHex(once[i+1]) && isHex(once[i+2]) {
			return pathError("the path is percent-encoded twice (it decodes to " + strconv.Quote(string(once)) + ")")
		}
	}
	return nil
}

type pathError string

func (e pathError) Error() string { return string(e) }
func (e pathError) Unwrap() error { return ErrPath }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
