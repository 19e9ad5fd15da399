package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRetentionOver(t *testing.T) {
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	snap := func(id string, age time.Duration, stored int64, pinned bool) Manifest {
		return Manifest{ID: id, Kind: KindSnapshot, Created: now.Add(-age), Stored: stored, Pinned: pinned}
	}
	day := 24 * time.Hour
	// Oldest first: a, b (pinned), c, d; a pause and a cache, older than all.
	all := []Manifest{
		snap("d", 1*day, 100, false),
		snap("b", 3*day, 100, true),
		snap("a", 4*day, 100, false),
		snap("c", 2*day, 100, false),
		{ID: "p", Kind: KindPause, Created: now.Add(-9 * day), Stored: 1000},
		{ID: "k", Kind: KindCache, Created: now.Add(-9 * day), Stored: 1000},
	}
	for _, tt := range []struct {
		name  string
		r     Retention
		spare string
		want  []string
	}{
		{"no bounds", Retention{}, "", nil},
		{"within every bound", Retention{MaxCount: 4, MaxAge: 5 * day, MaxTotal: 400}, "", nil},
		{"count", Retention{MaxCount: 2}, "", []string{"a", "c"}},
		{"count spares the pinned, which still counts", Retention{MaxCount: 1}, "", []string{"a", "c", "d"}},
		{"age", Retention{MaxAge: 2*day + time.Hour}, "", []string{"a"}},
		{"age exactly", Retention{MaxAge: 2 * day}, "", []string{"a"}},
		{"total", Retention{MaxTotal: 250}, "", []string{"a", "c"}},
		{"total, pauses and caches not counted", Retention{MaxTotal: 400}, "", nil},
		{"count and age", Retention{MaxCount: 3, MaxAge: 3*day + time.Hour}, "", []string{"a"}},
		{"the one just saved is spared", Retention{MaxCount: 1}, "d", []string{"a", "c"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, m := range tt.r.over(all, now, tt.spare) {
				got = append(got, m.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("over = %v, want %v", got, tt.want)
			}
		})
	}
}

// saveAt saves a snapshot of a fresh archive of n bytes for acme, then moves the clock on.
func saveAt(t *testing.T, tc *testCatalog, name string, n int, meta Meta) Manifest {
	t.Helper()
	meta.Tenant, meta.Name = "acme", name
	m, err := tc.Save(context.Background(), meta, bytes.NewReader(randomArchive(name, n)))
	if err != nil {
		t.Fatal(err)
	}
	tc.clock.Add(time.Hour)
	return m
}

func names(ms []Manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func listNames(t *testing.T, tc *testCatalog) []string {
	t.Helper()
	all, err := tc.List(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	return names(all)
}

func TestRetentionAfterSave(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{MaxCount: 3})
	saveAt(t, tc, "s1", 100, Meta{})
	saveAt(t, tc, "s2", 100, Meta{Pinned: true})
	saveAt(t, tc, "s3", 100, Meta{})
	if _, err := tc.Save(context.Background(), Meta{Tenant: "acme", Kind: KindPause, Lease: "l-1"}, bytes.NewReader(randomArchive("p", 10))); err != nil {
		t.Fatal(err)
	}
	tc.clock.Add(time.Hour)
	saveAt(t, tc, "s4", 100, Meta{})
	saveAt(t, tc, "s5", 100, Meta{})
	// s1 and s3 are removed (s2 is pinned); the pause is not a snapshot Retention counts.
	if got, want := listNames(t, tc), []string{"s5", "s4", "", "s2"}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	if got := names(tc.pruned); !slices.Equal(got, []string{"s1", "s3"}) {
		t.Fatalf("Pruned was told of %v, want [s1 s3]", got)
	}
	for _, m := range tc.pruned {
		if slices.Contains(tc.store.keys(), "tenants/acme/blobs/"+strings.TrimPrefix(m.ID, "sha256:")) {
			t.Fatalf("the blob of pruned %s is kept", m.Name)
		}
	}
}

func TestPrune(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    Retention
		want []string // pruned, oldest first
	}{
		{"age", Retention{MaxAge: 150 * time.Minute}, []string{"s1", "s2"}},
		{"total", Retention{MaxTotal: 3000}, []string{"s1", "s2"}},
		{"count", Retention{MaxCount: 1}, []string{"s1", "s2", "s3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCatalog(t, nil, Retention{})
			for i := range 4 {
				saveAt(t, tc, fmt.Sprint("s", i+1), 1000, Meta{})
			}
			// Now s1 is 4 hours old, s4 1 hour; each holds 1000 bytes and a few more stored.
			tc.retention = tt.r
			removed, err := tc.Prune(context.Background(), "acme")
			if err != nil {
				t.Fatal(err)
			}
			if got := names(removed); !slices.Equal(got, tt.want) || !slices.Equal(names(tc.pruned), tt.want) {
				t.Fatalf("Prune removed %v (told %v), want %v", got, names(tc.pruned), tt.want)
			}
			if got := len(listNames(t, tc)); got != 4-len(tt.want) {
				t.Fatalf("%d left", got)
			}
			// A second pass has nothing more to do.
			if removed, err := tc.Prune(context.Background(), "acme"); err != nil || len(removed) != 0 {
				t.Fatalf("a second Prune removed %v, %v", names(removed), err)
			}
		})
	}
}

// TestPruneSweepsOrphanBlobs: a blob no manifest refers to (a crash between a blob's Put and
// its manifest's) is removed by Prune once it is older than the grace a Save on another node
// needs.
func TestPruneSweepsOrphanBlobs(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	m := saveAt(t, tc, "kept", 100, Meta{})
	orphan := "tenants/acme/blobs/" + strings.Repeat("ab", 32)
	tc.store.set(orphan, []byte("left by a crash"))
	if _, err := tc.Prune(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tc.store.keys(), orphan) {
		t.Fatal("a fresh orphan was removed within its grace")
	}
	tc.clock.Add(orphanGrace)
	if _, err := tc.Prune(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"tenants/acme/blobs/" + strings.TrimPrefix(m.ID, "sha256:"), "tenants/acme/manifests/" + strings.TrimPrefix(m.ID, "sha256:") + ".json"}; !slices.Equal(tc.store.keys(), want) {
		t.Fatalf("after the grace the store holds %v, want %v", tc.store.keys(), want)
	}
}

func TestRetentionCheck(t *testing.T) {
	if _, err := NewCatalog(CatalogConfig{Store: newMemStore(), Keys: newLocalKeys(), Staging: t.TempDir(), Retention: Retention{MaxCount: -1}}); err == nil || !strings.Contains(err.Error(), "snapshots.retention") {
		t.Fatalf("a negative bound: %v", err)
	}
}
