package pool

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/snapshot"
)

// Cache is a named cache a template declares: a path its leases find filled, so a second
// `pip install` of the same packages need not fetch them again. A cache couples the leases that
// share it (what one left, the next one runs), so caches are off unless declared, and who may
// fill one is the mode's (README.md, "Caches").
type Cache struct {
	// Name names the cache within its template: lowercase letters, digits and inner hyphens,
	// at most 32 bytes. A tenant's copy is kept in the catalog as "TEMPLATE.NAME".
	Name string `yaml:"name"`
	// Path is where the sandbox finds the cache: absolute, or "~/..." for a path under the
	// template's workdir (its HOME). A tenant cache's is under the workdir or /tmp, the
	// sandbox's only writable places; a seeded cache's is outside both, in the image's
	// read-only root file system (the tmpfs mounts at the workdir and /tmp would hide it).
	Path string `yaml:"path"`
	// MaxMB caps a tenant cache's files' content: what a lease leaves over it is not written
	// back (the lease ends regardless; the refusal is recorded with the numbers). Required for
	// a tenant cache, and at most the tmpfs that holds it; a seeded cache is the image's and
	// takes none.
	MaxMB int64 `yaml:"max_mb"`
	// Mode is who fills the cache: CacheTenant (empty means it) or CacheSeeded.
	Mode CacheMode `yaml:"mode"`
}

// CacheMode is who fills a cache, and so who can poison it.
type CacheMode string

const (
	// CacheTenant is kept per tenant and template, encrypted under the tenant's key: restored
	// at the start of each of the tenant's leases of the template (unless the lease asks for
	// no caches), written back at a lease's end only when that lease asked for it when it
	// began. Never shared across tenants; a pause neither restores nor writes it.
	CacheTenant CacheMode = "tenant"
	// CacheSeeded is part of the template's image: the operator's build fills Path, the root
	// file system is read-only, and nothing is kept per tenant. Every lease of the template,
	// of every tenant, reads the same bytes, named in its trail by the image's digest.
	CacheSeeded CacheMode = "seeded"
)

func (m CacheMode) String() string { return string(m) }

// mode is c's mode with the default filled in.
func (c Cache) mode() CacheMode {
	if c.Mode == "" {
		return CacheTenant
	}
	return c.Mode
}

// dir is c's path in a sandbox of t: "~" is t's workdir.
func (c Cache) dir(t Template) string {
	if rest, ok := strings.CutPrefix(c.Path, "~/"); ok {
		return path.Join(t.Workdir, rest)
	}
	return c.Path
}

// catalogName is the name t's cache c is kept under in a tenant's catalog: the template's
// name is part of it, so a cache of one template never reaches a lease of another.
func (c Cache) catalogName(t Template) string { return t.Name + "." + c.Name }

// maxCaches bounds the caches one template declares.
const maxCaches = 8

// maxCacheName bounds a cache's name.
const maxCacheName = 32

// Events of a cache's file records: what a lease read from a cache at its start (a tenant
// cache's archive ID, or a seeded cache's image digest), and what it wrote back at its end.
const (
	EventCacheRead  audit.Event = "cache-read"
	EventCacheWrite audit.Event = "cache-write"
)

// validateCaches checks the caches t declares, naming each field as caches[i].field.
func (t Template) validateCaches() []error {
	var errs []error
	bad := func(i int, field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("caches[%d].%s: %s", i, field, fmt.Sprintf(format, args...)))
	}
	if len(t.Caches) > maxCaches {
		errs = append(errs, fmt.Errorf("caches: %d declared, at most %d", len(t.Caches), maxCaches))
	}
	names := map[string]bool{}
	var dirs []string
	for i, c := range t.Caches {
		switch {
		case !cacheName(c.Name):
			bad(i, "name", "%q must be 1 to %d lowercase letters, digits and inner hyphens", c.Name, maxCacheName)
		case names[c.Name]:
			bad(i, "name", "%q is declared twice", c.Name)
		}
		names[c.Name] = true
		if c.Mode != "" && c.Mode != CacheTenant && c.Mode != CacheSeeded {
			bad(i, "mode", "%q is not tenant or seeded", c.Mode)
			continue
		}
		dir := c.dir(t)
		if !path.IsAbs(dir) || path.Clean(dir) != dir || strings.HasPrefix(c.Path, "~") && !strings.HasPrefix(c.Path, "~/") {
			bad(i, "path", "%q must be a clean absolute path, or ~/ and a clean path under the workdir", c.Path)
			continue
		}
		if why := t.cachePlace(c, dir); why != "" {
			bad(i, "path", "%q %s", c.Path, why)
			continue
		}
		switch field, mb := t.tmpfsOf(dir); {
		case c.mode() == CacheSeeded && c.MaxMB != 0:
			bad(i, "max_mb", "a seeded cache is the image's, sized by the build: leave max_mb out")
		case c.mode() == CacheTenant && c.MaxMB <= 0:
			bad(i, "max_mb", "must be > 0: a tenant cache is written back only up to it")
		case c.mode() == CacheTenant && c.MaxMB > mb:
			bad(i, "max_mb", "%d is more than %s (%d), the tmpfs that holds it", c.MaxMB, field, mb)
		}
		for _, d := range dirs {
			if within(dir, d) || within(d, dir) {
				bad(i, "path", "%q overlaps another cache's path %s: a file would be kept twice", c.Path, d)
			}
		}
		dirs = append(dirs, dir)
	}
	return errs
}

// cachePlace says what is wrong with dir as the place of t's cache c, or "".
func (t Template) cachePlace(c Cache, dir string) string {
	writable := within(dir, t.Workdir) || within(dir, "/tmp")
	switch {
	case c.mode() == CacheTenant && (dir == t.Workdir || dir == "/tmp"):
		return "is a whole tmpfs: name a folder under it"
	case c.mode() == CacheTenant && !writable:
		return fmt.Sprintf("is not under the workdir %s or /tmp, the sandbox's only writable places, so no lease could fill it (a cache in the image is mode: seeded)", t.Workdir)
	case c.mode() == CacheSeeded && (writable || within(t.Workdir, dir) || within("/tmp", dir)):
		return fmt.Sprintf("is in or over the workdir %s or /tmp, whose tmpfs mounts hide what the image holds there: a seeded cache lies elsewhere in the image", t.Workdir)
	}
	return ""
}

// tmpfsOf is the size setting, and its value, of the tmpfs mount of t that holds dir (a path
// under the workdir or /tmp).
func (t Template) tmpfsOf(dir string) (field string, mb int64) {
	if within(dir, "/tmp") {
		return "tmp_mb", t.TmpMB
	}
	return "workspace_mb", t.WorkspaceMB
}

// within reports whether dir is base or under it.
func within(dir, base string) bool {
	return dir == base || base == "/" || strings.HasPrefix(dir, base+"/")
}

// cacheName reports whether name is a cache's name: [a-z0-9] at both ends, [a-z0-9-] between.
func cacheName(name string) bool {
	if name == "" || len(name) > maxCacheName || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	return strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// tenantCaches reports whether t declares a cache kept per tenant.
func (t Template) tenantCaches() bool {
	for _, c := range t.Caches {
		if c.mode() == CacheTenant {
			return true
		}
	}
	return false
}

// leaseCaches is the keeper's part in a lease's caches, as the lease table calls it.
type leaseCaches interface {
	// checkCaches refuses, before a sandbox is claimed, what a lease of t asks of caches and
	// this node cannot do.
	checkCaches(t Template, req LeaseRequest) error
	// readCaches fills l's claimed sandbox, not yet bound, with the caches its template
	// declares (tenant caches left empty when empty is set), and returns what to say of them
	// in the bind record. On an error the sandbox may hold part of a cache: the caller
	// destroys it.
	readCaches(ctx context.Context, l Lease, empty bool) (string, error)
	// writeCaches writes back l's tenant caches at its end if l asked for it; what fails is
	// recorded, and the lease ends regardless.
	writeCaches(ctx context.Context, l Lease)
}

var _ leaseCaches = (*keeper)(nil)

func (k *keeper) checkCaches(t Template, req LeaseRequest) error {
	switch {
	case !req.WriteCaches:
		return nil
	case !t.tenantCaches():
		return fmt.Errorf("%w: write_caches: template %s declares no cache kept per tenant, so there is nothing to write back", ErrBadRequest, t.Name)
	case k.catalog == nil:
		return fmt.Errorf("write_caches: %w", ErrNoSnapshots)
	}
	return nil
}

func (k *keeper) readCaches(ctx context.Context, l Lease, empty bool) (string, error) {
	t := k.templates[l.Template]
	var notes []string
	for _, c := range t.Caches {
		dir := c.dir(t)
		switch {
		case c.mode() == CacheSeeded:
			// Nothing to do but say what the lease can read: the image's bytes, which no
			// tenant's lease wrote (no_caches does not hide them).
			k.write(ctx, k.cacheRecord(l, EventCacheRead, dir, l.Sandbox.Image, 0,
				fmt.Sprintf("seeded cache %s: part of image %s, read-only, the same for every lease of template %s", c.Name, l.Sandbox.Image, t.Name), nil))
			notes = append(notes, fmt.Sprintf("seeded cache %s in image %s", c.Name, l.Sandbox.Image))
		case empty:
			notes = append(notes, fmt.Sprintf("cache %s left empty (no_caches)", c.Name))
		case k.catalog == nil:
			notes = append(notes, fmt.Sprintf("cache %s empty (this node keeps no caches)", c.Name))
		default:
			note, err := k.readCache(ctx, l, t, c)
			if err != nil {
				return "", err
			}
			notes = append(notes, note)
		}
	}
	if len(notes) == 0 {
		return "", nil
	}
	return "; " + strings.Join(notes, "; "), nil
}

// readCache restores l's tenant's copy of t's cache c, if it holds one, into l's sandbox.
func (k *keeper) readCache(ctx context.Context, l Lease, t Template, c Cache) (string, error) {
	start := time.Now()
	dir := c.dir(t)
	m, body, err := k.catalog.Open(ctx, l.Tenant, "cache:"+c.catalogName(t))
	switch {
	case errors.Is(err, snapshot.ErrNoSnapshot):
		return fmt.Sprintf("cache %s empty (none kept yet)", c.Name), nil
	case err != nil:
		// Nothing reached the sandbox: the lease goes on without the cache, and says why.
		k.write(ctx, k.cacheRecord(l, EventCacheRead, dir, "", 0, "", fmt.Errorf("cache %s was not read, the lease starts with it empty: %w", c.Name, err)))
		return fmt.Sprintf("cache %s empty (it could not be read: %v)", c.Name, err), nil
	}
	defer body.Close()
	// max_mb is what a lease may write back, checked then; here the bound is what the tmpfs
	// holding the cache can take, so a cache kept before max_mb was lowered still reads (and
	// is not taken for one altered in the store).
	_, holds := t.tmpfsOf(dir)
	sum, err := k.unpack(ctx, t, l.Sandbox, []string{strings.TrimPrefix(dir, "/")}, holds<<20, body)
	if err != nil {
		err = fmt.Errorf("restoring cache %s (%s) of template %s: %w; the lease is refused and its sandbox destroyed (lease with no_caches to start without it, and with write_caches too to replace it)",
			c.Name, m.ID, t.Name, k.mapErr(err))
		k.write(ctx, k.cacheRecord(l, EventCacheRead, dir, m.ID, m.Size, "", err))
		return "", err
	}
	k.write(ctx, k.cacheRecord(l, EventCacheRead, dir, m.ID, m.Size,
		fmt.Sprintf("tenant cache %s: %d files, %d bytes of content, written back by lease %s at %s", c.Name, sum.Entries, sum.Bytes, m.Lease, m.Created.Format(time.RFC3339)), nil))
	return fmt.Sprintf("cache %s restored (%s, %d files, %d bytes) in %s", c.Name, m.ID, sum.Entries, sum.Bytes, time.Since(start).Round(time.Millisecond)), nil
}

func (k *keeper) writeCaches(ctx context.Context, l Lease) {
	if !l.WriteCaches {
		return
	}
	t, ok := k.templates[l.Template]
	if !ok {
		return
	}
	for _, c := range t.Caches {
		if c.mode() != CacheTenant {
			continue
		}
		dir := c.dir(t)
		if k.catalog == nil {
			k.write(ctx, k.cacheRecord(l, EventCacheWrite, dir, "", 0, "", fmt.Errorf("cache %s was not written back: %w", c.Name, ErrNoSnapshots)))
			continue
		}
		// What the tenant held, to say whether the lease changed it (a manifest's read).
		before, berr := k.catalog.Get(ctx, l.Tenant, "cache:"+c.catalogName(t))
		m, err := k.archive(ctx, l, snapshot.Meta{Name: c.catalogName(t), Kind: snapshot.KindCache, Paths: []string{dir},
			Cap: fmt.Sprintf("the archive cap of cache %s of template %s (max_mb, with room for tar's headers)", c.Name, t.Name)},
			[]string{strings.TrimPrefix(dir, "/")}, c.MaxMB<<20)
		var refused *snapshot.Refused
		var big *snapshot.TooBig
		switch {
		case errors.As(err, &refused) && refused.Check == snapshot.SizeCheck:
			err = fmt.Errorf("cache %s was not written back: it holds more than its max_mb of %d MiB (%s); the tenant's copy is left as it was", c.Name, c.MaxMB, refused.Why)
		case errors.As(err, &big):
			err = fmt.Errorf("cache %s was not written back: %v; the tenant's copy is left as it was", c.Name, big)
		case err != nil:
			err = fmt.Errorf("cache %s was not written back: %w; the tenant's copy is left as it was", c.Name, k.mapErr(err))
		}
		was := ""
		switch {
		case errors.Is(berr, snapshot.ErrNoSnapshot):
			was = " (the first kept)"
		case berr != nil:
		case before.ID == m.ID:
			was = " (unchanged)"
		default:
			was = " (replaces " + before.ID + ")"
		}
		k.write(ctx, k.cacheRecord(l, EventCacheWrite, dir, m.ID, m.Size,
			fmt.Sprintf("tenant cache %s%s: %d files, an archive of %d bytes; the next leases of template %s that do not ask for no_caches start with it", c.Name, was, m.Files, m.Size, t.Name), err))
	}
}

// cacheRecord is a cache's file record for l: what was read or written (sum, the archive's ID
// or the image's digest, and its size), or the error that kept it from being.
func (k *keeper) cacheRecord(l Lease, event audit.Event, dir, sum string, size int64, reason string, err error) audit.Record {
	rec := audit.Record{Kind: audit.KindFile, Event: event, Node: k.node, Tenant: l.Tenant, Lease: l.ID, Task: l.Task,
		Sandbox: l.Sandbox.ID, Template: l.Template, Path: dir, Size: size, SHA256: sum, Decision: audit.Allow, Reason: reason}
	if err != nil {
		rec.Decision, rec.Reason = audit.Deny, err.Error()
	}
	return rec
}
