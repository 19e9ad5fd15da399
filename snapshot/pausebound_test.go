package snapshot

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// A paused lease holds no compute, so nothing but the store bounds how many a tenant keeps: a
// tenant that leased, filled its workspace and paused, over and over, filled the store (the
// node's disk, by default, which its audit trail shares) for as long as max_paused. Pauses are
// never pruned, so a pause that would take the tenant's pauses past Retention's count or total
// (counted apart from its snapshots) is refused; one that replaces its lease's pause counts
// as that one.
func TestPausesBounded(t *testing.T) {
	pause := func(tc *testCatalog, lease, seed string, n int) (Manifest, error) {
		return tc.Save(context.Background(), Meta{Tenant: "acme", Kind: KindPause, Lease: lease, Pinned: true},
			bytes.NewReader(randomArchive(seed, n)))
	}
	t.Run("count", func(t *testing.T) {
		tc := newTestCatalog(t, nil, Retention{MaxCount: 2})
		for _, l := range []string{"l-1", "l-2"} {
			if _, err := pause(tc, l, l, 1000); err != nil {
				t.Fatal(err)
			}
		}
		_, err := pause(tc, "l-3", "l-3", 1000)
		var full *PausesFull
		if !errors.As(err, &full) || !strings.Contains(err.Error(), "max_count 2") {
			t.Fatalf("a third pause under max_count 2 = %v; want *PausesFull naming the bound", err)
		}
		if _, err := tc.Get(context.Background(), "acme", "pause:l-3"); !errors.Is(err, ErrNoSnapshot) {
			t.Fatalf("the refused pause was kept: %v", err)
		}
		if _, err := pause(tc, "l-2", "l-2 again", 1000); err != nil {
			t.Fatalf("a pause replacing its lease's own: %v", err)
		}
		// Snapshots are bounded apart: the pauses do not make room for them, nor they for the pauses.
		saveAt(t, tc, "s", 1000, Meta{})
		if got := listNames(t, tc); len(got) != 3 {
			t.Fatalf("acme keeps %v; want its two pauses and its snapshot", got)
		}
	})
	t.Run("total", func(t *testing.T) {
		tc := newTestCatalog(t, nil, Retention{MaxTotal: 5000})
		if _, err := pause(tc, "l-1", "l-1", 3000); err != nil {
			t.Fatal(err)
		}
		_, err := pause(tc, "l-2", "l-2", 3000)
		var full *PausesFull
		if !errors.As(err, &full) || !strings.Contains(err.Error(), "max_total") {
			t.Fatalf("a pause past max_total = %v; want *PausesFull naming the bound", err)
		}
		if _, err := pause(tc, "l-1", "l-1 smaller", 2000); err != nil {
			t.Fatalf("a pause replacing its lease's own, within the total: %v", err)
		}
	})
}
