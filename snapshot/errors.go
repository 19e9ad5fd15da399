package snapshot

import (
	"errors"
	"fmt"
)

// The Catalog's errors, besides the Store's ErrNotFound and ErrStoreDown, each wrapped with
// what was asked: a caller maps them with errors.Is (ErrNoSnapshot to 404, ErrCorrupt to 422,
// ErrStoreDown and ErrKeysDown to 503) and shows the message.
var (
	// ErrNoSnapshot: the tenant holds no snapshot by that ref.
	ErrNoSnapshot = errors.New("no such snapshot")
	// ErrOtherTenant: what was asked for is stored under the tenant but belongs to another one
	// (a blob or manifest copied across). Which tenant it belongs to is never said.
	ErrOtherTenant = errors.New("the snapshot belongs to another tenant")
	// ErrCorrupt: a blob or manifest was altered, cut short or mixed with another, or its data
	// key does not unwrap under the tenant's key, or its content does not hash to its ID.
	ErrCorrupt = errors.New("the snapshot is corrupt")
	// ErrKeysDown: the key service (Vault) did not answer, or answered that it cannot serve
	// (sealed, failing), as opposed to an answer that refuses.
	ErrKeysDown = errors.New("the snapshot key service is unreachable")
)

// TooBig is what Save fails with when the archive is larger than Meta.MaxSize: it stops
// reading there, so the size past the cap is not known.
type TooBig struct {
	// Max is the cap in bytes of archive, Setting names where it comes from.
	Max     int64
	Setting string
}

func (e *TooBig) Error() string {
	return fmt.Sprintf("the snapshot is over its cap: more than %d bytes (%s), the cap set by %s; keep less in the workspace, or raise the cap",
		e.Max, mib(e.Max), e.Setting)
}

// mib writes n bytes in MiB for people ("100 MiB", "0.5 MiB").
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// PausesFull is what Save of a pause fails with when the tenant's paused leases would with it
// be more than Retention.MaxCount, or take more than its MaxTotal (counted apart from its
// snapshots, since pauses are never pruned to make room).
type PausesFull struct {
	// Count and Total are the tenant's pauses and their stored bytes with this one.
	Count    int
	Total    int64
	MaxCount int
	MaxTotal int64
}

func (e *PausesFull) Error() string {
	return fmt.Sprintf("the tenant's paused leases would be %d, taking %s in the store, with this pause, past snapshots.retention (max_count %d, max_total %s; 0 is no bound); resume or release a paused lease first",
		e.Count, mib(e.Total), e.MaxCount, mib(e.MaxTotal))
}
