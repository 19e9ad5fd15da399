package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Catalog keeps tenants' snapshots in a Store, each archive encrypted under a data key of its
// own that Keys wraps under its tenant's key: Save, Open, Get, List, Delete, and Prune by
// Retention (retention.go). Safe for concurrent use. The changes one Catalog makes to a
// tenant's snapshots are made one at a time; two nodes sharing a store are not kept from
// racing (one's Delete of a snapshot may remove the blob the other's Save of the same archive
// has just found there); Prune removes a blob left with no manifest after an hour.
type Catalog struct {
	store     Store
	keys      Keys
	staging   string
	retention Retention
	pruned    func(Manifest)
	now       func() time.Time
	log       *slog.Logger

	mu    sync.Mutex
	locks map[string]chan struct{} // by tenant: one change at a time
}

// CatalogConfig configures a Catalog.
type CatalogConfig struct {
	Store Store
	Keys  Keys
	// Staging is a directory on the node's disk where Save writes a blob, encrypted, before it
	// is stored; made (0700) if missing. No archive byte is ever written there unencrypted, and
	// each blob is removed once stored or failed (and a crash's leftovers by NewCatalog).
	Staging string
	// Retention bounds each tenant's snapshots after each Save and in Prune; zero, no bound.
	Retention Retention
	// Pruned, when set, is told of each snapshot Retention removes (to record it), in Save
	// and in Prune alike.
	Pruned func(Manifest)
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Log records what is skipped (a manifest that does not decode, or is another tenant's)
	// and what fails after a Save succeeded; default slog.Default().
	Log *slog.Logger
}

// stagingPattern names Save's staging files.
const stagingPattern = "save-*.blob"

// NewCatalog returns the Catalog of cfg.
func NewCatalog(cfg CatalogConfig) (*Catalog, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("snapshot catalog: no store")
	case cfg.Keys == nil:
		return nil, errors.New("snapshot catalog: no keys (Vault transit)")
	case cfg.Staging == "":
		return nil, errors.New("snapshot catalog: no staging directory")
	}
	if err := cfg.Retention.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Staging, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot catalog: staging directory: %w", err)
	}
	// A crash during a Save leaves its encrypted staging file; nothing else is left there.
	if old, err := filepath.Glob(filepath.Join(cfg.Staging, stagingPattern)); err == nil {
		for _, f := range old {
			os.Remove(f)
		}
	}
	c := &Catalog{store: cfg.Store, keys: cfg.Keys, staging: cfg.Staging, retention: cfg.Retention,
		pruned: cfg.Pruned, now: cfg.Now, log: cfg.Log, locks: map[string]chan struct{}{}}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// Save reads archive to its end (or to just past meta.MaxSize, then fails with *TooBig),
// hashing it for its ID and encrypting it under a fresh data key into a staging file, then
// stores the blob (unless the tenant holds that archive already) and the manifest, and applies
// Retention to the tenant's snapshots (never to the one just saved). Saving an archive the
// tenant holds as a snapshot already saves that snapshot anew: its time, lease and labels are
// the new ones, its name too unless the new save has none, and it stays pinned if it was (an ID
// names one snapshot of the tenant). A pause replaces its lease's previous pause, a cache its
// previous version. A store that fails fails Save (with ErrStoreDown when it is unreachable)
// and leaves nothing of this Save behind.
func (c *Catalog) Save(ctx context.Context, meta Meta, archive io.Reader) (Manifest, error) {
	if meta.Kind == "" {
		meta.Kind = KindSnapshot
	}
	if err := meta.check(); err != nil {
		return Manifest{}, err
	}
	tseg, _ := segment("tenant", meta.Tenant)
	key, wrapped, err := c.keys.DataKey(ctx, meta.Tenant)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot of tenant %s: a data key: %w", meta.Tenant, err)
	}
	defer clear(key)

	f, err := os.CreateTemp(c.staging, stagingPattern)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot of tenant %s: staging: %w", meta.Tenant, err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	m, err := c.seal(ctx, meta, archive, f, key, wrapped)
	if err != nil {
		return Manifest{}, err
	}

	unlock, err := c.lock(ctx, meta.Tenant)
	if err != nil {
		return Manifest{}, err
	}
	defer unlock()
	if m.Kind == KindPause {
		if err := c.pauseRoom(ctx, m); err != nil {
			return Manifest{}, err
		}
	}
	if err := c.put(ctx, tseg, &m, f); err != nil {
		return Manifest{}, err
	}
	if m.Kind == KindSnapshot {
		if _, err := c.prune(ctx, meta.Tenant, tseg, m.ID, false); err != nil {
			c.log.Error("snapshot retention after a save failed", "tenant", meta.Tenant, "err", err)
		}
	}
	return m, nil
}

// pauseRoom refuses pause m (*PausesFull) when the tenant's pauses would with it be more than
// Retention's MaxCount or take more than its MaxTotal, counted apart from its snapshots:
// pauses are never pruned, and nothing else bounds how many a tenant keeps, since a paused
// lease holds no compute. m counts in place of the pause of its lease it replaces. The caller
// holds the tenant's lock.
func (c *Catalog) pauseRoom(ctx context.Context, m Manifest) error {
	r := c.retention
	if r.MaxCount == 0 && r.MaxTotal == 0 {
		return nil
	}
	all, err := c.List(ctx, m.Tenant)
	if err != nil {
		return err
	}
	full := &PausesFull{Count: 1, Total: m.Stored, MaxCount: r.MaxCount, MaxTotal: r.MaxTotal}
	for _, o := range all {
		if o.Kind == KindPause && o.Lease != m.Lease {
			full.Count++
			full.Total += o.Stored
		}
	}
	if r.MaxCount > 0 && full.Count > r.MaxCount || r.MaxTotal > 0 && full.Total > r.MaxTotal {
		return full
	}
	return nil
}

// seal reads archive into f as a blob sealed with key, and returns its manifest.
func (c *Catalog) seal(ctx context.Context, meta Meta, archive io.Reader, f *os.File, key, wrapped []byte) (Manifest, error) {
	buf := bufio.NewWriterSize(f, 256<<10)
	w, err := NewWriter(buf, meta.Tenant, key, wrapped)
	if err != nil {
		return Manifest{}, err
	}
	var src io.Reader = ctxReader{ctx, archive}
	if meta.MaxSize > 0 {
		src = io.LimitReader(src, meta.MaxSize+1)
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(sum, w), src)
	switch {
	case err != nil:
		return Manifest{}, fmt.Errorf("snapshot of tenant %s: reading the archive: %w", meta.Tenant, err)
	case meta.MaxSize > 0 && n > meta.MaxSize:
		return Manifest{}, &TooBig{Max: meta.MaxSize, Setting: meta.capSetting()}
	}
	if err := w.Close(); err != nil {
		return Manifest{}, fmt.Errorf("snapshot of tenant %s: staging: %w", meta.Tenant, err)
	}
	if err := buf.Flush(); err != nil {
		return Manifest{}, fmt.Errorf("snapshot of tenant %s: staging: %w", meta.Tenant, err)
	}
	files := 0
	if meta.Files != nil {
		files = meta.Files()
	}
	return Manifest{
		ID: idPrefix + hex.EncodeToString(sum.Sum(nil)), Name: meta.Name, Tenant: meta.Tenant,
		Template: meta.Template, Image: meta.Image, Lease: meta.Lease, Kind: meta.Kind,
		Created: c.now().UTC(), Size: n, Stored: w.Written(), Files: files,
		Paths: slices.Clone(meta.Paths), Labels: maps.Clone(meta.Labels), Pinned: meta.Pinned,
	}, nil
}

// put stores m's blob from f (unless the tenant's blob of that archive is there already) and
// then m, under the tenant's lock; it removes what it stored if it fails.
func (c *Catalog) put(ctx context.Context, tseg string, m *Manifest, f *os.File) error {
	hexID, _ := parseID(m.ID)
	file, err := manifestFile(m.Kind, hexID, m.Lease, m.Name)
	if err != nil {
		return err
	}
	bk := blobKey(tseg, hexID)
	stored, err := c.heldBlob(ctx, m.Tenant, bk)
	if err != nil {
		return c.failed("saving snapshot "+m.ID+" of tenant "+m.Tenant, err)
	}
	if stored >= 0 {
		m.Stored = stored
	} else if err := c.store.Put(ctx, bk, f, m.Stored); err != nil {
		return c.failed("saving snapshot "+m.ID+" of tenant "+m.Tenant, err)
	}
	mk := manifestPrefix(tseg) + file
	old, err := c.readManifest(ctx, mk, file)
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrCorrupt):
		old = Manifest{}
	case err != nil:
		c.undo(bk, stored)
		return c.failed("saving snapshot "+m.ID+" of tenant "+m.Tenant, err)
	}
	if old.Tenant == m.Tenant && old.ID == m.ID {
		m.Pinned = m.Pinned || old.Pinned
		if m.Name == "" {
			m.Name = old.Name
		}
	}
	b, err := encodeManifest(*m)
	if err != nil {
		c.undo(bk, stored)
		return err
	}
	if err := c.store.Put(ctx, mk, bytes.NewReader(b), int64(len(b))); err != nil {
		c.undo(bk, stored)
		return c.failed("saving snapshot "+m.ID+" of tenant "+m.Tenant, err)
	}
	if old.ID != "" && old.ID != m.ID {
		// The pause or cache this one replaced may leave its blob unused.
		if err := c.dropBlobIfUnused(ctx, m.Tenant, tseg, old.ID); err != nil {
			c.log.Error("removing a replaced snapshot's blob failed", "tenant", m.Tenant, "snapshot", old.ID, "err", err)
		}
	}
	return nil
}

// heldBlob returns the size of the tenant's blob at bk when it is there and sealed for the
// tenant, or -1 when it is not (one that another tenant's header names, or that does not
// read, is stored over).
func (c *Catalog) heldBlob(ctx context.Context, tenant, bk string) (int64, error) {
	obj, err := c.store.Stat(ctx, bk)
	if errors.Is(err, ErrNotFound) {
		return -1, nil
	} else if err != nil {
		return 0, err
	}
	rc, err := c.store.Get(ctx, bk)
	if errors.Is(err, ErrNotFound) {
		return -1, nil
	} else if err != nil {
		return 0, err
	}
	defer rc.Close()
	h, err := ReadHeader(rc)
	if errors.Is(err, ErrCorrupt) || err == nil && h.Tenant != tenant {
		return -1, nil
	} else if err != nil {
		return 0, err
	}
	return obj.Size, nil
}

// undo removes the blob put stored (stored < 0: it was not there before).
func (c *Catalog) undo(bk string, stored int64) {
	if stored >= 0 {
		return
	}
	// Not the caller's context: the Put may have failed because it ended.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.store.Delete(ctx, bk); err != nil {
		c.log.Error("removing the blob of a failed save failed", "blob", bk, "err", err)
	}
}

// Open returns tenant's snapshot ref and a reader of its archive, which fails (ErrCorrupt) at
// a chunk that does not authenticate, and at the end (its last Read) when the archive does
// not hash to the snapshot's ID. A snapshot the tenant's prefix holds but another tenant's
// manifest or blob header names, or whose data key does not unwrap under tenant's key, is
// refused (ErrOtherTenant, ErrCorrupt). The caller closes the reader.
func (c *Catalog) Open(ctx context.Context, tenant, ref string) (Manifest, io.ReadCloser, error) {
	m, err := c.Get(ctx, tenant, ref)
	if err != nil {
		return Manifest{}, nil, err
	}
	tseg, _ := segment("tenant", tenant)
	hexID, _ := parseID(m.ID)
	body, err := c.store.Get(ctx, blobKey(tseg, hexID))
	if errors.Is(err, ErrNotFound) {
		return Manifest{}, nil, fmt.Errorf("%w: snapshot %s of tenant %s: its blob is missing from %s", ErrCorrupt, m.ID, tenant, c.store)
	} else if err != nil {
		return Manifest{}, nil, c.failed("opening snapshot "+m.ID+" of tenant "+tenant, err)
	}
	r, err := c.openBlob(ctx, tenant, m, body)
	if err != nil {
		body.Close()
		return Manifest{}, nil, err
	}
	return m, r, nil
}

func (c *Catalog) openBlob(ctx context.Context, tenant string, m Manifest, body io.ReadCloser) (io.ReadCloser, error) {
	h, err := ReadHeader(body)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s of tenant %s: %w", m.ID, tenant, err)
	}
	if h.Tenant != tenant {
		return nil, fmt.Errorf("%w: snapshot %s is stored under tenant %s, but its blob is sealed for another tenant", ErrOtherTenant, m.ID, tenant)
	}
	key, err := c.keys.Unwrap(ctx, tenant, h.Key)
	if errors.Is(err, ErrKeysDown) {
		return nil, fmt.Errorf("snapshot %s of tenant %s: %w", m.ID, tenant, err)
	} else if err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: its data key does not unwrap under tenant %s's key (the blob was altered, or sealed for another tenant): %v",
			ErrCorrupt, m.ID, tenant, err)
	}
	defer clear(key)
	r, err := NewReader(body, h, tenant, key)
	if err != nil {
		return nil, err
	}
	return &verifier{r: r, body: body, m: m, sum: sha256.New()}, nil
}

// verifier reads a blob's archive, hashing it, and fails its last Read when the archive is not
// the snapshot's.
type verifier struct {
	r    *Reader
	body io.Closer
	m    Manifest
	sum  hash.Hash
	n    int64
	err  error
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.sum.Write(p[:n])
	v.n += int64(n)
	switch {
	case v.n > v.m.Size:
		v.err = fmt.Errorf("%w: snapshot %s does not verify: it holds more than the %d bytes its manifest says", ErrCorrupt, v.m.ID, v.m.Size)
	case err == io.EOF:
		got := idPrefix + hex.EncodeToString(v.sum.Sum(nil))
		if got != v.m.ID || v.n != v.m.Size {
			v.err = fmt.Errorf("%w: snapshot %s does not verify: its archive (%d bytes) hashes to %s", ErrCorrupt, v.m.ID, v.n, got)
		} else {
			v.err = io.EOF
		}
	case err != nil:
		v.err = err
	default:
		return n, nil
	}
	return n, v.err
}

func (v *verifier) Close() error { return v.body.Close() }

// Get returns tenant's snapshot ref: an ID, "pause:LEASE", "cache:NAME", or a name (the
// newest snapshot with that name). ErrNoSnapshot when the tenant holds none by that ref;
// ErrOtherTenant when its manifest names another tenant.
func (c *Catalog) Get(ctx context.Context, tenant, ref string) (Manifest, error) {
	tseg, err := segment("tenant", tenant)
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: %v", ErrNoSnapshot, err)
	}
	t, err := parseRef(ref)
	if err != nil {
		return Manifest{}, err
	}
	if t.name != "" {
		all, err := c.List(ctx, tenant)
		if err != nil {
			return Manifest{}, err
		}
		for _, m := range all {
			if m.Kind == KindSnapshot && m.Name == t.name {
				return m, nil
			}
		}
		return Manifest{}, fmt.Errorf("%w: tenant %s has no snapshot named %q", ErrNoSnapshot, tenant, t.name)
	}
	m, err := c.readManifest(ctx, manifestPrefix(tseg)+t.file, t.file)
	switch {
	case errors.Is(err, ErrNotFound):
		return Manifest{}, fmt.Errorf("%w: tenant %s has no snapshot %s", ErrNoSnapshot, tenant, ref)
	case errors.Is(err, ErrCorrupt):
		return Manifest{}, fmt.Errorf("snapshot %s of tenant %s: %w", ref, tenant, err)
	case err != nil:
		return Manifest{}, c.failed("reading snapshot "+ref+" of tenant "+tenant, err)
	case m.Tenant != tenant:
		return Manifest{}, fmt.Errorf("%w: snapshot %s is stored under tenant %s, but its manifest names another tenant", ErrOtherTenant, ref, tenant)
	}
	return m, nil
}

// listConcurrency bounds the manifests List reads at once.
const listConcurrency = 8

// List returns tenant's snapshots of every kind, newest first. A manifest that does not
// decode, or names another tenant, is left out (and logged).
func (c *Catalog) List(ctx context.Context, tenant string) ([]Manifest, error) {
	tseg, err := segment("tenant", tenant)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoSnapshot, err)
	}
	objs, err := c.store.List(ctx, manifestPrefix(tseg))
	if err != nil {
		return nil, c.failed("listing the snapshots of tenant "+tenant, err)
	}
	got := make([]*Manifest, len(objs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listConcurrency)
	for i, o := range objs {
		file := strings.TrimPrefix(o.Key, manifestPrefix(tseg))
		if strings.Contains(file, "/") || !strings.HasSuffix(file, ".json") {
			continue
		}
		g.Go(func() error {
			m, err := c.readManifest(gctx, o.Key, file)
			switch {
			case errors.Is(err, ErrNotFound):
				// Deleted since it was listed.
			case errors.Is(err, ErrCorrupt):
				c.log.Warn("a snapshot manifest is skipped", "tenant", tenant, "key", o.Key, "err", err)
			case err != nil:
				return c.failed("listing the snapshots of tenant "+tenant, err)
			case m.Tenant != tenant:
				c.log.Warn("a snapshot manifest naming another tenant is skipped", "tenant", tenant, "key", o.Key)
			default:
				got[i] = &m
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []Manifest
	for _, m := range got {
		if m != nil {
			out = append(out, *m)
		}
	}
	slices.SortFunc(out, func(a, b Manifest) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Ref(), b.Ref())
	})
	return out, nil
}

// Delete deletes tenant's snapshot ref (as Get reads refs), and its blob unless another of
// the tenant's manifests (a pause, a cache) refers to it.
func (c *Catalog) Delete(ctx context.Context, tenant, ref string) error {
	unlock, err := c.lock(ctx, tenant)
	if err != nil {
		return err
	}
	defer unlock()
	m, err := c.Get(ctx, tenant, ref)
	if err != nil {
		return err
	}
	tseg, _ := segment("tenant", tenant)
	return c.deleteManifest(ctx, tseg, m)
}

// deleteManifest deletes m, then its blob if no manifest of the tenant refers to it: a crash
// between the two leaves a blob with no manifest, never a manifest with no blob.
func (c *Catalog) deleteManifest(ctx context.Context, tseg string, m Manifest) error {
	if err := c.store.Delete(ctx, manifestPrefix(tseg)+mustFile(m)); err != nil {
		return c.failed("deleting snapshot "+m.Ref()+" of tenant "+m.Tenant, err)
	}
	return c.dropBlobIfUnused(ctx, m.Tenant, tseg, m.ID)
}

// dropBlobIfUnused deletes the tenant's blob of id when none of its manifests refers to it.
func (c *Catalog) dropBlobIfUnused(ctx context.Context, tenant, tseg, id string) error {
	all, err := c.List(ctx, tenant)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(all, func(m Manifest) bool { return m.ID == id }) {
		return nil
	}
	hexID, _ := parseID(id)
	if err := c.store.Delete(ctx, blobKey(tseg, hexID)); err != nil {
		return c.failed("deleting the blob of snapshot "+id+" of tenant "+tenant, err)
	}
	return nil
}

// readManifest reads the manifest at key, whose file name is file.
func (c *Catalog) readManifest(ctx context.Context, key, file string) (Manifest, error) {
	rc, err := c.store.Get(ctx, key)
	if err != nil {
		return Manifest{}, err
	}
	defer rc.Close()
	return decodeManifest(rc, file)
}

// failed says what failed, naming the store when its error does not.
func (c *Catalog) failed(doing string, err error) error {
	if s := c.store.String(); !strings.Contains(err.Error(), s) {
		return fmt.Errorf("%s: %s: %w", doing, s, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// lock takes tenant's lock, or fails when ctx ends first (or has ended: then it fails whether
// or not the lock is free, not as a select happens to choose); unlock releases it.
func (c *Catalog) lock(ctx context.Context, tenant string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("snapshots of tenant %s: %w", tenant, err)
	}
	c.mu.Lock()
	ch := c.locks[tenant]
	if ch == nil {
		ch = make(chan struct{}, 1)
		c.locks[tenant] = ch
	}
	c.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("snapshots of tenant %s: waiting for another change to them: %w", tenant, ctx.Err())
	}
}

// ctxReader ends a read at ctx's end.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
