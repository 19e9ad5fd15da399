package ratelimit

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New[string](2, 3)
	now := time.Unix(0, 0)
	l.now = func() time.Time { return now }
	for i := range 3 {
		if !l.Allow("a") {
			t.Fatalf("burst request %d refused", i)
		}
	}
	if l.Allow("a") {
		t.Fatal("request past the burst allowed")
	}
	if !l.Allow("b") {
		t.Fatal("another key was limited")
	}
	now = now.Add(500 * time.Millisecond) // one token back
	if !l.Allow("a") || l.Allow("a") {
		t.Fatal("refill is not rate per second")
	}
	var none *Limiter[string]
	if !none.Allow("x") || New[string](0, 0) != nil {
		t.Fatal("a nil limiter must allow")
	}
}
