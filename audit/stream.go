package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
)

// headMargin is how far past the head a Tap keeps bytes, so a secret that starts inside the
// head is matched whole by the redaction step before the head is cut (credentials longer than
// this could leave a prefix in the head).
const headMargin = 8 << 10

// Tap measures one standard stream as it passes: its size, its SHA-256 and its first bytes. Use
// it as an io.Writer beside the stream's real destination.
type Tap struct {
	h    hash.Hash
	n    int64
	head []byte
	max  int
}

// NewTap keeps the first max bytes (none when max is 0).
func NewTap(max int) *Tap { return &Tap{h: sha256.New(), max: max} }

// Write measures p; it never fails.
func (t *Tap) Write(p []byte) (int, error) {
	t.h.Write(p)
	t.n += int64(len(p))
	if keep := t.max + headMargin - len(t.head); t.max > 0 && keep > 0 {
		t.head = append(t.head, p[:min(keep, len(p))]...)
	}
	return len(p), nil
}

// Stream is what the tap measured, the head passed through redact (the one redaction step: every
// credential value the node holds for the lease replaced) before it is cut to its length.
func (t *Tap) Stream(redact func(string) string) *Stream {
	s := &Stream{Size: t.n, SHA256: hex.EncodeToString(t.h.Sum(nil))}
	if len(t.head) > 0 {
		head := string(t.head)
		if redact != nil {
			head = redact(head)
		}
		if len(head) > t.max {
			head = head[:t.max]
		}
		s.Head = head
	}
	return s
}
