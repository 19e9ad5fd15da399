package snapshot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Retention bounds each tenant's snapshots of KindSnapshot (pauses and caches have lives of
// their own): past any bound, its oldest unpinned snapshots are removed until it is within
// them all, or only pinned ones are left. Pinned snapshots count toward the bounds. A zero
// field leaves its bound off. MaxCount and MaxTotal bound a tenant's pauses too, apart from
// its snapshots: pauses are never removed, so a pause past them is refused (*PausesFull).
type Retention struct {
	// MaxCount bounds how many snapshots a tenant keeps.
	MaxCount int
	// MaxAge bounds how long a snapshot is kept after it was (last) saved.
	MaxAge time.Duration
	// MaxTotal bounds the bytes a tenant's snapshots take in the store (Manifest.Stored).
	MaxTotal int64
}

func (r Retention) check() error {
	if r.MaxCount < 0 || r.MaxAge < 0 || r.MaxTotal < 0 {
		return fmt.Errorf("snapshots.retention: bounds must be >= 0 (0 leaves one off), not %+v", r)
	}
	return nil
}

// over returns what r removes of all (a tenant's manifests) at now, oldest first, sparing the
// snapshot spare (the one just saved).
func (r Retention) over(all []Manifest, now time.Time, spare string) []Manifest {
	var snaps []Manifest
	for _, m := range all {
		if m.Kind == KindSnapshot {
			snaps = append(snaps, m)
		}
	}
	slices.SortFunc(snaps, func(a, b Manifest) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	count, total := len(snaps), int64(0)
	for _, m := range snaps {
		total += m.Stored
	}
	var out []Manifest
	for _, m := range snaps {
		if m.Pinned || m.ID == spare {
			continue
		}
		if r.MaxCount > 0 && count > r.MaxCount || r.MaxTotal > 0 && total > r.MaxTotal || r.MaxAge > 0 && now.Sub(m.Created) > r.MaxAge {
			out = append(out, m)
			count, total = count-1, total-m.Stored
		}
	}
	return out
}

// orphanGrace is how old a blob no manifest refers to must be before Prune removes it: a
// Save on another node stores its blob before its manifest.
const orphanGrace = time.Hour

// Prune applies Retention to tenant's snapshots now, and removes the tenant's blobs that no
// manifest has referred to for an hour (left by a crash, or by two nodes racing). It returns
// the snapshots it removed (each also told to CatalogConfig.Pruned); on an error, those it
// removed before it.
func (c *Catalog) Prune(ctx context.Context, tenant string) ([]Manifest, error) {
	tseg, err := segment("tenant", tenant)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoSnapshot, err)
	}
	unlock, err := c.lock(ctx, tenant)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return c.prune(ctx, tenant, tseg, "", true)
}

// prune removes what Retention removes of tenant's snapshots but spare, and, when orphans is
// set, the tenant's blobs no manifest refers to. The caller holds the tenant's lock.
func (c *Catalog) prune(ctx context.Context, tenant, tseg, spare string, orphans bool) ([]Manifest, error) {
	if c.retention == (Retention{}) && !orphans {
		return nil, nil
	}
	all, err := c.List(ctx, tenant)
	if err != nil {
		return nil, err
	}
	refs := map[string]int{}
	for _, m := range all {
		refs[m.ID]++
	}
	var removed []Manifest
	for _, m := range c.retention.over(all, c.now(), spare) {
		if err := c.store.Delete(ctx, manifestPrefix(tseg)+mustFile(m)); err != nil {
			return removed, c.failed("pruning snapshot "+m.ID+" of tenant "+tenant, err)
		}
		if refs[m.ID]--; refs[m.ID] == 0 {
			hexID, _ := parseID(m.ID)
			if err := c.store.Delete(ctx, blobKey(tseg, hexID)); err != nil {
				c.log.Error("removing a pruned snapshot's blob failed (a later prune removes it)", "tenant", tenant, "snapshot", m.ID, "err", err)
			}
		}
		removed = append(removed, m)
		if c.pruned != nil {
			c.pruned(m)
		}
	}
	if orphans {
		if err := c.sweep(ctx, tenant, tseg, refs); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// sweep removes the tenant's blobs that no manifest refers to (refs, by ID) and that are older
// than orphanGrace.
func (c *Catalog) sweep(ctx context.Context, tenant, tseg string, refs map[string]int) error {
	blobs, err := c.store.List(ctx, tenantPrefix(tseg)+"blobs/")
	if err != nil {
		return c.failed("listing the blobs of tenant "+tenant, err)
	}
	var errs []error
	for _, b := range blobs {
		id := idPrefix + strings.TrimPrefix(b.Key, tenantPrefix(tseg)+"blobs/")
		if refs[id] > 0 || c.now().Sub(b.Modified) < orphanGrace {
			continue
		}
		if err := c.store.Delete(ctx, b.Key); err != nil {
			errs = append(errs, c.failed("removing blob "+b.Key+" that no snapshot refers to", err))
			continue
		}
		c.log.Info("removed a blob no snapshot refers to", "tenant", tenant, "blob", b.Key)
	}
	return errors.Join(errs...)
}

// mustFile is the manifest file of m, one that was read (so its name is valid).
func mustFile(m Manifest) string {
	hexID, _ := parseID(m.ID)
	file, _ := manifestFile(m.Kind, hexID, m.Lease, m.Name)
	return file
}
