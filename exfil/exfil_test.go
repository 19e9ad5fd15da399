package exfil

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestShape(t *testing.T) {
	g := New(Limits{})
	now := time.Now()
	for _, c := range []struct {
		name string
		want string // part of the reason; "" means allowed
	}{
		{"files.example", ""},
		{"cdn-01.files.example", ""},
		{strings.Repeat("a", 41) + ".files.example", "label longer than 40"},
		{strings.Repeat("abcdefghij.", 12) + "example", "name longer than 120"},
		{"q8Zr3kLp0XvW2nYtA9.files.example", "high-entropy"},
		{"mzxw6ytboi2dcmrtgq3dsnzzha4tmnbvg4.files.example", "high-entropy"},
	} {
		got := g.Check("l-1", "files.example", c.name, now)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("Check(%q) = %q, want a reason with %q", c.name, got, c.want)
		}
	}
}

// Distinct names per lease and apex: the limit holds within the window, a name already seen is
// always allowed, refused names are not counted, other leases and apexes have their own counts,
// and the window slides.
func TestDistinctNames(t *testing.T) {
	g := New(Limits{MaxDistinct: 3, Window: time.Minute})
	now := time.Now()
	for i := range 3 {
		if r := g.Check("l-1", "files.example", fmt.Sprintf("n%d.files.example", i), now); r != "" {
			t.Fatalf("name %d refused: %s", i, r)
		}
	}
	if r := g.Check("l-1", "files.example", "n3.files.example", now); !strings.Contains(r, "more than 3 distinct names") {
		t.Fatalf("fourth distinct name: %q", r)
	}
	if r := g.Check("l-1", "files.example", "n3.files.example", now); r == "" {
		t.Fatal("a refused name was counted as seen")
	}
	if r := g.Check("l-1", "files.example", "n1.files.example", now); r != "" {
		t.Fatalf("a name already seen was refused: %s", r)
	}
	if r := g.Check("l-2", "files.example", "n3.files.example", now); r != "" {
		t.Fatalf("another lease shares the count: %s", r)
	}
	if r := g.Check("l-1", "other.example", "n3.other.example", now); r != "" {
		t.Fatalf("another apex shares the count: %s", r)
	}
	if r := g.Check("l-1", "files.example", "n9.files.example", now.Add(2*time.Minute)); r != "" {
		t.Fatalf("the window did not slide: %s", r)
	}
}
