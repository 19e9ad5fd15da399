package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/snapshot"
)

// Snapshots is where a node keeps the state that travels (package snapshot's Catalog): the
// archives of workspaces, encrypted under their tenant's key, content-addressed.
type Snapshots interface {
	Save(ctx context.Context, meta snapshot.Meta, archive io.Reader) (snapshot.Manifest, error)
	Open(ctx context.Context, tenant, ref string) (snapshot.Manifest, io.ReadCloser, error)
	Get(ctx context.Context, tenant, ref string) (snapshot.Manifest, error)
	List(ctx context.Context, tenant string) ([]snapshot.Manifest, error)
	Delete(ctx context.Context, tenant, ref string) error
	// Prune applies retention to tenant's snapshots, returning what it removed.
	Prune(ctx context.Context, tenant string) ([]snapshot.Manifest, error)
}

// Events of the file records a snapshot makes: taken (of a running lease, or at its pause), and
// deleted; a lease from a snapshot says what it restored in its bind record.
const (
	EventSnapshot       audit.Event = "snapshot"
	EventSnapshotDelete audit.Event = "snapshot-delete"
	// EventRestore records a restore refused (a crafted or altered archive, a digest that does
	// not verify); one that succeeds is said in the lease's bind or resume record.
	EventRestore audit.Event = "restore"
)

// ErrNoSnapshots is what a snapshot, a lease from one or a pause gets on a node that keeps none.
var ErrNoSnapshots = errors.New("this node keeps no snapshots (snapshots.store is not set)")

// SnapshotPolicy is what a template's snapshots may hold, and how long its leases may stay
// paused.
type SnapshotPolicy struct {
	// Paths are writable paths besides the workspace a snapshot may hold when asked (each under
	// the workspace or /tmp, never /tmp itself); a pause keeps them all.
	Paths []string `yaml:"paths"`
	// MaxMB caps an archive's file content; zero means workspace_mb + tmp_mb (all there is).
	MaxMB int64 `yaml:"max_mb"`
	// MaxPaused is how long a lease may stay paused before it is released; zero means 24h.
	MaxPaused time.Duration `yaml:"max_paused"`
	// Memory makes a pause that asks for it keep running processes: the sandbox's exec agent is
	// its main process (so that what it runs is the sandbox's own, which a checkpoint keeps),
	// and a pause checkpoints the sandbox instead of archiving its files. gVisor templates only
	// (runtime runsc), on an engine that can checkpoint (Checkpointer.CanCheckpoint).
	Memory bool `yaml:"memory"`
}

// DefaultMaxPaused is how long a lease may stay paused unless its template says.
const DefaultMaxPaused = 24 * time.Hour

// maxEntries bounds an archive's entries, whatever its size: the receipt and the filter hold
// each one's name for a moment.
const maxEntries = 200_000

// maxBytes is the most file content a snapshot of t may hold.
func (t Template) maxBytes() int64 {
	if t.Snapshot.MaxMB > 0 {
		return t.Snapshot.MaxMB << 20
	}
	return (t.WorkspaceMB + t.TmpMB) << 20
}

// maxPaused is how long a lease of t may stay paused.
func (t Template) maxPaused() time.Duration {
	if t.Snapshot.MaxPaused > 0 {
		return t.Snapshot.MaxPaused
	}
	return DefaultMaxPaused
}

// validateSnapshot checks the template's snapshot policy.
func (t Template) validateSnapshot() []error {
	var errs []error
	for _, p := range t.Snapshot.Paths {
		clean := path.Clean(p)
		switch {
		case !path.IsAbs(p) || clean != p:
			errs = append(errs, fmt.Errorf("snapshot.paths: %q must be a clean absolute path", p))
		case clean == t.Workdir || clean == "/tmp":
			errs = append(errs, fmt.Errorf("snapshot.paths: %q is kept already or cannot be restored (the workspace is always kept; /tmp itself is root's: name a folder under it)", p))
		case !strings.HasPrefix(clean, t.Workdir+"/") && !strings.HasPrefix(clean, "/tmp/"):
			errs = append(errs, fmt.Errorf("snapshot.paths: %q is not under the workspace %s or /tmp, the sandbox's only writable places", p, t.Workdir))
		}
	}
	if t.Snapshot.MaxMB < 0 {
		errs = append(errs, fmt.Errorf("snapshot.max_mb: must be >= 0"))
	}
	if t.Snapshot.MaxPaused < 0 {
		errs = append(errs, fmt.Errorf("snapshot.max_paused: must be >= 0"))
	}
	if rt, _ := t.RuntimePlatform(); t.Snapshot.Memory && rt != "runsc" {
		errs = append(errs, fmt.Errorf("snapshot.memory: only gVisor keeps a sandbox's memory (runtime runsc); this template runs %s", t.EngineRuntime()))
	}
	return errs
}

// keeper keeps the state that travels between leases: snapshots of a lease's workspace, leases
// started from one, and pause and resume (pause.go). It acts through the lease table (which
// lease, and its end at a pause) and the runtime (the archive is made and unpacked inside the
// sandbox, as its user); the one lock it holds is which leases it is archiving.
type keeper struct {
	node      string
	templates map[string]Template
	runtime   Runtime
	// checkpointer is the runtime as the backend gave it (before WithPolicy), which may be a
	// Checkpointer.
	checkpointer Runtime
	audit        audit.Sink
	table        *leaseTable
	supply       *supply
	catalog      Snapshots // nil: this node keeps no snapshots
	// scratch is where a checkpoint is written on its way to or from the catalog (Config.Scratch).
	scratch     string
	checkpoints checkpoints
	// ops carries a lease's background processes across a pause that keeps memory.
	ops *sandboxOps
	// claim takes a name for this node for a while, or fails when another holds it (the
	// store's ClaimJTI): two resumes of one paused lease cannot both win.
	claim   func(ctx context.Context, name, holder string, until time.Time) error
	unclaim func(ctx context.Context, name, holder string) error
	log     *slog.Logger
	// reapingPaused is set while a pass over paused leases runs (one at a time).
	reapingPaused atomic.Bool
	// archiving holds the leases a snapshot or a pause is archiving.
	archiving archiving
}

// archiving is the set of leases whose workspace is being archived (a snapshot, a pause): one
// archive of a lease at a time, so a lease is never paused twice at once, and a tenant cannot
// have one workspace staged many times over on the node's disk by asking for it many times at
// once. A lease's snapshots and pauses are all taken by its node. Safe for concurrent use.
type archiving struct {
	mu     sync.Mutex
	leases map[string]bool
}

// begin marks lease as being archived, or fails with ErrLeaseState when it is already; done
// ends that.
func (a *archiving) begin(lease string) (done func(), err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.leases[lease] {
		return nil, fmt.Errorf("%w: a snapshot or pause of lease %s is under way; try again once it is done", ErrLeaseState, lease)
	}
	if a.leases == nil {
		a.leases = map[string]bool{}
	}
	a.leases[lease] = true
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.leases, lease)
	}, nil
}

// SnapshotRequest asks for a snapshot of a lease.
type SnapshotRequest struct {
	Name string
	// Paths are the template's declared paths to keep besides the workspace.
	Paths []string
}

// Snapshot archives tenant's lease id's workspace (and the declared paths asked for) while the
// sandbox runs, and keeps it, encrypted, under the tenant. The snapshot is recorded in the
// lease's trail with its digest.
func (k *keeper) Snapshot(ctx context.Context, tenant, id string, req SnapshotRequest) (snapshot.Manifest, error) {
	if k.catalog == nil {
		return snapshot.Manifest{}, ErrNoSnapshots
	}
	l, err := k.table.Held(ctx, tenant, id)
	if err != nil {
		return snapshot.Manifest{}, err
	}
	t := k.templates[l.Template]
	for _, p := range req.Paths {
		if !slices.Contains(t.Snapshot.Paths, path.Clean(p)) {
			err := fmt.Errorf("%w: %q is not a path template %s declares for snapshots (snapshot.paths: %s)", ErrBadRequest, p, t.Name, strings.Join(t.Snapshot.Paths, ", "))
			k.record(ctx, l, EventSnapshot, snapshot.Manifest{}, err)
			return snapshot.Manifest{}, err
		}
	}
	if err := snapshot.CheckName(req.Name); err != nil {
		return snapshot.Manifest{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	done, err := k.archiving.begin(l.ID)
	if err != nil {
		return snapshot.Manifest{}, err
	}
	defer done()
	m, err := k.save(ctx, l, snapshot.Meta{Name: req.Name, Kind: snapshot.KindSnapshot}, req.Paths)
	k.record(ctx, l, EventSnapshot, m, err)
	return m, err
}

// save archives l's workspace and paths into the catalog with meta, filling in what l says.
func (k *keeper) save(ctx context.Context, l Lease, meta snapshot.Meta, paths []string) (snapshot.Manifest, error) {
	t := k.templates[l.Template]
	meta.Paths = append([]string{t.Workdir}, paths...)
	meta.Cap = fmt.Sprintf("the archive cap of template %s (snapshot.max_mb, with room for tar's headers)", t.Name)
	m, err := k.archive(ctx, l, meta, k.roots(t, paths), t.maxBytes())
	var refused *snapshot.Refused
	if errors.As(err, &refused) && refused.Check == snapshot.SizeCheck {
		what := fmt.Sprintf("snapshot.max_mb of template %s", t.Name)
		if t.Snapshot.MaxMB == 0 {
			what = fmt.Sprintf("workspace_mb + tmp_mb of template %s, as its snapshot.max_mb is not set", t.Name)
		}
		return m, fmt.Errorf("%w: the snapshot holds more than its cap of %d bytes (%s): %v", ErrTooLarge, t.maxBytes(), what, err)
	}
	return m, k.mapErr(err)
}

// archive archives roots (relative to /) of l's sandbox into the catalog with meta, filling in
// what l says, their files' content capped at maxBytes; its errors are the catalog's and the
// filter's, unmapped. What a snapshot and a cache (cache.go) share.
func (k *keeper) archive(ctx context.Context, l Lease, meta snapshot.Meta, roots []string, maxBytes int64) (snapshot.Manifest, error) {
	t := k.templates[l.Template]
	meta.Tenant, meta.Template, meta.Image, meta.Lease = l.Tenant, t.Name, l.Sandbox.Image, l.ID
	// The filter caps the files' content, naming the setting; the catalog's cap on the archive
	// (headers too) is only a backstop past it.
	meta.MaxSize = maxBytes + maxBytes/4 + 64<<20
	uid, gid, _ := ParseUser(t.User)
	// The sandbox's tar makes the archive; the filter checks and normalizes it on its way to
	// the catalog, and counts its entries for the manifest.
	raw, rawW := io.Pipe()
	made := make(chan error, 1)
	go func() {
		var stderr strings.Builder
		// Files, folders and links only: a FIFO or a socket the workspace holds is left out
		// (they restore as nothing anyway), rather than failing the snapshot at the filter.
		// Sorted, so the same tree is the same archive (the same ID): a tmpfs lists a folder
		// newest first, so a tree restored and archived again would come out in another order.
		script := `cd / && find "$@" \( -type f -o -type d -o -type l \) -print0 2>/dev/null | LC_ALL=C sort -z | ` +
			`LC_ALL=C tar -c --null --no-recursion --numeric-owner --format=pax --warning=no-file-changed --warning=no-file-removed -T -`
		args := append([]string{"sh", "-c", script, "snapshot"}, roots...)
		code, err := k.runtime.Exec(ctx, l.Sandbox, ExecRequest{Cmd: args}, nil, rawW, &stderr)
		// tar exits 1 when a file changed while it read it: the sandbox runs on, and the
		// snapshot holds what was read.
		if err == nil && code != 0 && code != 1 {
			err = fmt.Errorf("archiving %s in the sandbox failed (tar exited %d): %s", strings.Join(roots, " "), code, strings.TrimSpace(stderr.String()))
		}
		rawW.CloseWithError(err)
		made <- err
	}()
	filtered, filteredW := io.Pipe()
	sums := make(chan snapshot.Summary, 1)
	go func() {
		// The filter reads past the archive's end marker to the end of what tar writes (its
		// padding), so tar's last write does not fail.
		sum, err := snapshot.Filter(raw, filteredW, snapshot.Rules{Roots: roots, UID: int(uid), GID: int(gid), MaxBytes: maxBytes, MaxEntries: maxEntries})
		raw.CloseWithError(err)
		sums <- sum
		filteredW.CloseWithError(err)
	}()
	// Called once the catalog has read the archive to its end, so once the filter is done.
	meta.Files = func() int { return (<-sums).Entries }
	m, err := k.catalog.Save(ctx, meta, filtered)
	filtered.CloseWithError(errors.New("the snapshot was not taken"))
	if merr := <-made; err == nil && merr != nil {
		err = merr
	}
	return m, err
}

// roots are the archive's members for t with paths: the workspace and each path, relative to /.
func (k *keeper) roots(t Template, paths []string) []string {
	roots := []string{strings.TrimPrefix(t.Workdir, "/")}
	for _, p := range paths {
		roots = append(roots, strings.TrimPrefix(path.Clean(p), "/"))
	}
	return roots
}

// mapErr gives a catalog's error the pool's meaning, so the API answers with the right status.
func (k *keeper) mapErr(err error) error {
	var big *snapshot.TooBig
	var full *snapshot.PausesFull
	var refused *snapshot.Refused
	switch {
	case err == nil:
		return nil
	case errors.As(err, &big), errors.As(err, &full):
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	case errors.As(err, &refused):
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	case errors.Is(err, snapshot.ErrNoSnapshot), errors.Is(err, snapshot.ErrOtherTenant), errors.Is(err, snapshot.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrNoSuchSnapshot, err)
	}
	return err
}

// ErrTooLarge is what a snapshot over its template's cap fails with, and a pause past the
// tenant's bound on paused leases (snapshots.retention).
var ErrTooLarge = errors.New("too large")

// ErrNoSuchSnapshot is what a snapshot the tenant does not hold is refused with (another
// tenant's is not told apart from none).
var ErrNoSuchSnapshot = errors.New("no such snapshot")

// Snapshots lists tenant's snapshots, newest first.
func (k *keeper) Snapshots(ctx context.Context, tenant string) ([]snapshot.Manifest, error) {
	if k.catalog == nil {
		return nil, ErrNoSnapshots
	}
	all, err := k.catalog.List(ctx, tenant)
	return all, k.mapErr(err)
}

// SnapshotInfo returns tenant's snapshot ref (an ID or a name).
func (k *keeper) SnapshotInfo(ctx context.Context, tenant, ref string) (snapshot.Manifest, error) {
	if k.catalog == nil {
		return snapshot.Manifest{}, ErrNoSnapshots
	}
	m, err := k.catalog.Get(ctx, tenant, ref)
	return m, k.mapErr(err)
}

// DeleteSnapshot deletes tenant's snapshot ref; a paused lease's is deleted only by resuming
// or releasing that lease.
func (k *keeper) DeleteSnapshot(ctx context.Context, tenant, ref string) error {
	m, err := k.SnapshotInfo(ctx, tenant, ref)
	if err != nil {
		return err
	}
	// A cache may be deleted (cache:TEMPLATE.NAME): the way to be rid of one a run may have
	// poisoned. A pause may not: it is the paused lease itself.
	if m.Kind == snapshot.KindPause {
		return fmt.Errorf("%w: %s is a paused lease's state: resume or release the lease instead", ErrBadRequest, ref)
	}
	if err := k.mapErr(k.catalog.Delete(ctx, tenant, m.Ref())); err != nil {
		return err
	}
	k.write(ctx, audit.Record{Kind: audit.KindFile, Event: EventSnapshotDelete, Node: k.node, Tenant: tenant, Lease: m.Lease,
		Path: strings.Join(m.Paths, " "), Size: m.Size, SHA256: m.ID, Decision: audit.Allow, Reason: "snapshot " + describe(m)})
	return nil
}

// restore unpacks tenant's snapshot ref into sb, a fresh sandbox of t no one else can reach yet,
// checking every entry on its way and the archive's digest at its end.
func (k *keeper) restore(ctx context.Context, tenant string, t Template, sb Sandbox, m snapshot.Manifest, body io.Reader) (Restored, error) {
	start := time.Now()
	// The manifest is not signed: its paths are taken only where the template declares them.
	var paths []string
	for _, p := range m.Paths {
		if slices.Contains(t.Snapshot.Paths, p) {
			paths = append(paths, p)
		}
	}
	sum, err := k.unpack(ctx, t, sb, k.roots(t, paths), t.maxBytes(), body)
	if err != nil {
		return Restored{}, k.mapErr(err)
	}
	return Restored{Snapshot: m.ID, Files: sum.Entries, Size: sum.Bytes, Took: time.Since(start), Kept: apitype.KeptFiles}, nil
}

// unpack unpacks the archive body into roots (relative to /) of sb, a sandbox of t, as its user,
// checking every entry on its way (their files' content capped at maxBytes); its errors are
// unmapped. What a snapshot's restore and a cache's (cache.go) share.
func (k *keeper) unpack(ctx context.Context, t Template, sb Sandbox, roots []string, maxBytes int64, body io.Reader) (snapshot.Summary, error) {
	uid, gid, _ := ParseUser(t.User)
	filtered, filteredW := io.Pipe()
	var sum snapshot.Summary
	filterDone := make(chan error, 1)
	go func() {
		// The archive's digest is checked at the end of what the catalog reads, past the
		// archive's end marker, to which the filter reads: an archive whose bytes are not what
		// its id says fails the restore (the sandbox is then destroyed, never leased).
		var err error
		sum, err = snapshot.Filter(body, filteredW, snapshot.Rules{Roots: roots, UID: int(uid), GID: int(gid), MaxBytes: maxBytes, MaxEntries: maxEntries})
		filteredW.CloseWithError(err)
		filterDone <- err
	}()
	// As the sandbox user: nothing in the archive goes through a link it makes (the filter),
	// and a link the image left in a root that leads out of it refuses the restore (as an
	// archive upload does).
	script := `for r; do d=/$r; mkdir -p "$d" || exit 45; find "$d" -type l -exec sh -c 'for l; do t=$(realpath -m -- "$l"); case "$t" in "$0"|"$0"/*) ;; *) ` +
		`echo "$l leads to $t through a symbolic link, outside $0: an archive is not restored where it could follow it" >&2; exit 46;; esac; done' "$d" {} + || exit 46; done; ` +
		`LC_ALL=C exec tar -x --no-same-owner -p --delay-directory-restore -C /`
	var stderr strings.Builder
	code, err := k.runtime.Exec(ctx, sb, ExecRequest{Cmd: append([]string{"sh", "-c", script, "restore"}, roots...)}, filtered, io.Discard, &stderr)
	filtered.CloseWithError(errors.New("the restore ended"))
	ferr := <-filterDone
	var refused *snapshot.Refused
	switch {
	case errors.As(ferr, &refused):
		// Every archive passed the same check when it was saved: one refused on its way back
		// was altered in the store.
		err = fmt.Errorf("%w: %v (it passed this check when it was taken, so it was altered since)", snapshot.ErrCorrupt, ferr)
	case ferr != nil:
		err = ferr
	case err == nil && code != 0:
		err = fmt.Errorf("unpacking the archive in the sandbox failed (exit %d): %s", code, strings.TrimSpace(stderr.String()))
	}
	return sum, err
}

// Restored is how a lease's workspace was restored.
type Restored struct {
	Snapshot string
	Files    int
	Size     int64
	Took     time.Duration
	// Kept is what came back: files, or memory and files (a checkpoint's restore).
	Kept apitype.Kept
	// sandbox is the sandbox as a checkpoint's restore left it (its address may have changed);
	// nil: the claimed one, as it was.
	sandbox *Sandbox
}

// record writes a snapshot's audit record (a file event: its digest, size and paths).
func (k *keeper) record(ctx context.Context, l Lease, event audit.Event, m snapshot.Manifest, err error) {
	rec := audit.Record{Kind: audit.KindFile, Event: event, Node: k.node, Tenant: l.Tenant, Lease: l.ID, Task: l.Task,
		Sandbox: l.Sandbox.ID, Path: strings.Join(m.Paths, " "), Size: m.Size, SHA256: m.ID, Decision: audit.Allow}
	if m.ID != "" {
		rec.Reason = "snapshot " + describe(m)
	}
	if err != nil {
		rec.Decision, rec.Reason = audit.Deny, err.Error()
	}
	k.write(ctx, rec)
}

func (k *keeper) write(ctx context.Context, rec audit.Record) {
	if err := k.audit.Write(ctx, rec); err != nil {
		k.log.Error("audit write failed", "err", err)
	}
}

// describe names a snapshot in a record: its name (if any), kind and sizes.
func describe(m snapshot.Manifest) string {
	name := ""
	if m.Name != "" {
		name = fmt.Sprintf("%q ", m.Name)
	}
	return fmt.Sprintf("%s(%s): %d files, %d bytes, %d stored encrypted", name, m.Kind, m.Files, m.Size, m.Stored)
}

// from finds tenant's snapshot ref for a lease from it (leaseTable.from), and returns what
// restores it in the sandbox the lease claims.
func (k *keeper) from(ctx context.Context, tenant, ref string) (snapshot.Manifest, func(context.Context, Template, Sandbox) (Restored, error), error) {
	m, err := k.SnapshotInfo(ctx, tenant, ref)
	if err != nil {
		return snapshot.Manifest{}, nil, err
	}
	if m.Kind != snapshot.KindSnapshot {
		return snapshot.Manifest{}, nil, fmt.Errorf("%w: %s is a %s, not a snapshot: a paused lease is resumed, a cache is mounted by its template", ErrBadRequest, ref, m.Kind)
	}
	if _, ok := k.templates[m.Template]; !ok {
		return snapshot.Manifest{}, nil, fmt.Errorf("%w %q: snapshot %s was taken of a lease of it, and this node serves no such template", ErrUnknownTemplate, m.Template, m.ID)
	}
	return m, k.restorer(m), nil
}

// restorer restores m in a claimed sandbox of its template. A sandbox of another image than the
// snapshot's (the template's image was rebuilt since) is not used: a sandbox of the snapshot's
// image is made for the lease while that image is still on the node, and the lease is refused
// once it is gone.
func (k *keeper) restorer(m snapshot.Manifest) func(context.Context, Template, Sandbox) (Restored, error) {
	return func(ctx context.Context, t Template, sb Sandbox) (Restored, error) {
		if m.Image != "" && sb.Image != "" && sb.Image != m.Image {
			return Restored{}, fmt.Errorf("%w: snapshot %s was taken on image %s of template %s, which its sandboxes no longer run (they run %s); lease afresh and copy what you need",
				ErrImageGone, m.ID, m.Image, t.Name, sb.Image)
		}
		got, body, err := k.catalog.Open(ctx, m.Tenant, m.Ref())
		if err != nil {
			return Restored{}, k.mapErr(err)
		}
		defer body.Close()
		return k.restore(ctx, m.Tenant, t, sb, got, body)
	}
}

// ErrImageGone is what a lease from a snapshot whose image the template no longer runs gets.
var ErrImageGone = errors.New("the snapshot's image is gone")

// maxTrailer bounds what may follow an archive's end marker: tar's padding of its last record
// (10 KiB by default), and nothing like a second archive.
const maxTrailer = 1 << 20

// drain reads what follows the end of an archive in r, what, to its end: at most maxTrailer
// bytes, else an error.
func drain(r io.Reader, what string) error {
	n, err := io.Copy(io.Discard, io.LimitReader(r, maxTrailer+1))
	switch {
	case err != nil:
		return err
	case n > maxTrailer:
		return fmt.Errorf("%s holds more than %d bytes past the archive's end", what, maxTrailer)
	}
	return nil
}
