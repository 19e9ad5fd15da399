package snapshot

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Names that reach a store key or a Vault path (a tenant, a lease, a cache's name) pass through
// segment, which maps every string to one path segment, injectively: a name of lowercase
// letters, digits and inner hyphens is kept as it is; any other becomes "_" and its bytes in
// hex. Neither form holds '/' or '.', so no name can climb out of its prefix or name another
// tenant's key ("acme/../globex" is "_61636d652f2e2e2f676c6f626578", never "globex"); and since
// a kept name never begins with "_", no name is escaped into another's kept form.

// maxSegmentName bounds a name that is escaped, so its segment (1 + 2*100 bytes) stays a
// file name every file system takes (255 bytes).
const maxSegmentName = 100

// maxPlainSegment bounds a name that is kept as it is.
const maxPlainSegment = 64

// segment returns s as one path segment; what says what s is, for the error.
func segment(what, s string) (string, error) {
	switch {
	case s == "":
		return "", fmt.Errorf("%s: empty", what)
	case plainSegment(s):
		return s, nil
	case len(s) > maxSegmentName:
		return "", fmt.Errorf("%s %.40q...: longer than %d bytes", what, s, maxSegmentName)
	}
	return "_" + hex.EncodeToString([]byte(s)), nil
}

// plainSegment says whether s is kept as it is: [a-z0-9] at both ends, [a-z0-9-] between.
func plainSegment(s string) bool {
	if len(s) > maxPlainSegment || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// idPrefix begins every snapshot ID: the archive's SHA-256, in hex, follows.
const idPrefix = "sha256:"

// The prefixes of the refs of a pause's and a cache's manifest (Manifest.Ref).
const (
	pauseRefPrefix = "pause:"
	cacheRefPrefix = "cache:"
)

// maxName bounds a snapshot's (or a cache's) name.
const maxName = 128

// CheckName says what is wrong with name as a snapshot's name, or nil; "" (no name) is fine. A
// name is at most 128 bytes of printable UTF-8 with no leading or trailing space, and does not
// begin like a ref of another form ("sha256:", "pause:", "cache:"), so a ref is never both.
func CheckName(name string) error {
	switch {
	case name == "":
		return nil
	case len(name) > maxName:
		return fmt.Errorf("snapshot name %.40q...: longer than %d bytes", name, maxName)
	case !utf8.ValidString(name):
		return fmt.Errorf("snapshot name %q: not UTF-8", name)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("snapshot name %q: begins or ends with a space", name)
	}
	for _, p := range []string{idPrefix, pauseRefPrefix, cacheRefPrefix} {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("snapshot name %q: begins with %q, as a ref of another kind does", name, p)
		}
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("snapshot name %q: holds an unprintable character", name)
		}
	}
	return nil
}

// errBadID is what a ref that begins with "sha256:" but is no ID fails with.
var errBadID = errors.New(`not a snapshot ID ("sha256:" and 64 lowercase hex digits)`)

// parseID returns the hex digest of the ID id.
func parseID(id string) (string, error) {
	h, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("%q: %w", id, errBadID)
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", fmt.Errorf("%q: %w", id, errBadID)
		}
	}
	return h, nil
}
