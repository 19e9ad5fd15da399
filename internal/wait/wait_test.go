package wait

import (
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(time.Second, "three calls", func() bool { n++; return n == 3 }); err != nil || n != 3 {
		t.Fatalf("%v after %d calls", err, n)
	}
	start := time.Now()
	err := Until(50*time.Millisecond, "what never comes", func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "gave up after 50ms waiting for what never comes") {
		t.Fatalf("%v", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("the wait ran long past its timeout")
	}
}
