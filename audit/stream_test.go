package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// A tap measures the whole stream, keeps its head, and redacts a secret that straddles the head's
// end before cutting it, so no prefix of the secret is kept.
func TestTap(t *testing.T) {
	secret := "s3cr3t-v4lu3-0123456789"
	data := strings.Repeat("x", 90) + secret + strings.Repeat("y", 1000)
	tap := NewTap(100)
	for i := 0; i < len(data); i += 7 {
		tap.Write([]byte(data[i:min(i+7, len(data))]))
	}
	s := tap.Stream(func(v string) string { return strings.ReplaceAll(v, secret, "[redacted]") })
	sum := sha256.Sum256([]byte(data))
	if s.Size != int64(len(data)) || s.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("measured %d bytes %s", s.Size, s.SHA256)
	}
	if len(s.Head) != 100 || !strings.HasSuffix(s.Head, "[redacted]") || strings.Contains(s.Head, "s3cr") {
		t.Fatalf("head %q", s.Head)
	}
	if got := NewTap(0); got.Stream(nil).Head != "" {
		t.Fatal("a tap of max 0 kept a head")
	}
}
