// Package wait is the bounded poll every test and benchmark of airlock waits with: it gives up
// after a time, and then says what it waited for.
package wait

import (
	"fmt"
	"time"
)

// Until calls cond until it holds, or returns an error naming what after timeout. It asks again
// after 10 ms, then ever less often, up to every 100 ms: a quick condition is seen at once, and
// one that runs a command is not run in a tight loop.
func Until(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	pause := 10 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s waiting for %s", timeout, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
	return nil
}

// T is what For needs of a test: *testing.T and *testing.B are.
type T interface {
	Helper()
	Fatal(args ...any)
}

// For is Until that fails t.
func For(t T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Until(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}
