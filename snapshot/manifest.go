package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Kind is what a snapshot is kept for.
type Kind string

const (
	// KindSnapshot is a snapshot a tenant asked for: named or not, listed, subject to
	// Retention. Its ref is its ID, or its name.
	KindSnapshot Kind = "snapshot"
	// KindPause is what a paused lease kept: one per lease (Meta.Lease), its ref
	// "pause:LEASE"; never pruned by Retention, deleted when the lease resumes or is released.
	KindPause Kind = "pause"
	// KindCache is a tenant's cache: one per name (Meta.Name), its ref "cache:NAME"; never
	// pruned by Retention, replaced when written back.
	KindCache Kind = "cache"
)

func (k Kind) String() string { return string(k) }

func (k Kind) valid() bool { return k == KindSnapshot || k == KindPause || k == KindCache }

// Manifest describes a stored snapshot: what it holds and what restores it. It is small JSON,
// stored beside the blob, and holds no secret. Manifests are not signed: a Catalog checks
// the tenant and the ID against the blob when it is opened, and what restores it (Template,
// Image, Paths) is for the caller to check against its own configuration before it trusts it.
type Manifest struct {
	// ID is "sha256:" and the hex SHA-256 of the archive: the same archive has the same ID.
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Tenant string `json:"tenant"`
	// Template, Image (its digest) and Lease are those of the lease it was taken of.
	Template string `json:"template,omitempty"`
	Image    string `json:"image,omitempty"`
	Lease    string `json:"lease,omitempty"`
	Kind     Kind   `json:"kind"`
	// Created is when it was saved (last saved, for an archive saved again).
	Created time.Time `json:"created"`
	// Size is the archive's bytes, Stored the blob's (encrypted), Files the archive's entries.
	Size   int64 `json:"size"`
	Stored int64 `json:"stored"`
	Files  int   `json:"files"`
	// Paths are what the archive holds (the workspace first, then declared paths).
	Paths []string `json:"paths,omitempty"`
	// Labels are the caller's (a pause's task and end, for instance); never a secret.
	Labels map[string]string `json:"labels,omitempty"`
	// Pinned snapshots are never pruned by Retention (Delete still deletes them).
	Pinned bool `json:"pinned,omitempty"`
}

// Ref is what names m in Open, Get and Delete: its ID for a snapshot, "pause:LEASE" for a
// pause, "cache:NAME" for a cache. (An ID names the tenant's snapshot of that archive only,
// never a pause or cache that holds the same bytes.)
func (m Manifest) Ref() string {
	switch m.Kind {
	case KindPause:
		return pauseRefPrefix + m.Lease
	case KindCache:
		return cacheRefPrefix + m.Name
	}
	return m.ID
}

// Meta is what Save records of an archive besides what it learns by reading it.
type Meta struct {
	Tenant   string
	Name     string // optional for a snapshot (CheckName); required for a cache
	Template string
	Image    string
	Lease    string // required for a pause
	// Kind defaults to KindSnapshot.
	Kind   Kind
	Paths  []string
	Labels map[string]string
	// Pinned saves the snapshot pinned (see Manifest.Pinned). Saving an archive the tenant
	// holds as a pinned snapshot already keeps it pinned.
	Pinned bool
	// Files, when set, is called once the archive has been read to its end, for the number of
	// its entries (a filter counting them as they pass, say).
	Files func() int
	// MaxSize caps the archive's bytes; zero leaves it uncapped. Cap names where the cap comes
	// from, for the error (*TooBig); default "the snapshot cap of template TEMPLATE".
	MaxSize int64
	Cap     string
}

// Bounds of what a manifest holds, so each stays small.
const (
	maxManifest   = 64 << 10
	maxPaths      = 64
	maxPath       = 4096
	maxLabels     = 32
	maxLabelKey   = 64
	maxLabelValue = 1024
)

// check says what is wrong with meta, naming the field.
func (meta Meta) check() error {
	if _, err := segment("tenant", meta.Tenant); err != nil {
		return fmt.Errorf("snapshot meta: %w", err)
	}
	if !meta.Kind.valid() {
		return fmt.Errorf("snapshot meta: kind %q is not snapshot, pause or cache", meta.Kind)
	}
	if err := CheckName(meta.Name); err != nil {
		return err
	}
	switch {
	case meta.Kind == KindPause && meta.Lease == "":
		return errors.New("snapshot meta: a pause needs its lease")
	case meta.Kind == KindCache && meta.Name == "":
		return errors.New("snapshot meta: a cache needs a name")
	case meta.MaxSize < 0:
		return fmt.Errorf("snapshot meta: max size %d < 0", meta.MaxSize)
	case len(meta.Paths) > maxPaths:
		return fmt.Errorf("snapshot meta: %d paths (at most %d)", len(meta.Paths), maxPaths)
	case len(meta.Labels) > maxLabels:
		return fmt.Errorf("snapshot meta: %d labels (at most %d)", len(meta.Labels), maxLabels)
	}
	if _, err := segment("lease", meta.Lease); meta.Lease != "" && err != nil {
		return fmt.Errorf("snapshot meta: %w", err)
	}
	if _, err := segment("name", meta.Name); meta.Name != "" && err != nil {
		return fmt.Errorf("snapshot meta: %w", err)
	}
	for _, p := range meta.Paths {
		if p == "" || len(p) > maxPath {
			return fmt.Errorf("snapshot meta: a path of %d bytes (want 1 to %d)", len(p), maxPath)
		}
	}
	for k, v := range meta.Labels {
		if k == "" || len(k) > maxLabelKey || len(v) > maxLabelValue {
			return fmt.Errorf("snapshot meta: label %.40q: keys are 1 to %d bytes, values at most %d", k, maxLabelKey, maxLabelValue)
		}
	}
	return nil
}

// capSetting names where meta.MaxSize comes from.
func (meta Meta) capSetting() string {
	if meta.Cap != "" {
		return meta.Cap
	}
	return fmt.Sprintf("the snapshot cap of template %s", meta.Template)
}

// The store's layout: under "tenants/" and the tenant's segment, "blobs/HEX" (the encrypted
// archive whose ID is sha256:HEX) and "manifests/": HEX.json for a snapshot, pause.LEASE.json
// for a pause and cache.NAME.json for a cache (LEASE and NAME as segments). A pause or a cache
// refers to the blob of its archive, which a snapshot of the same archive shares.
func tenantPrefix(tseg string) string { return "tenants/" + tseg + "/" }

func blobKey(tseg, hex string) string { return tenantPrefix(tseg) + "blobs/" + hex }

func manifestPrefix(tseg string) string { return tenantPrefix(tseg) + "manifests/" }

// manifestFile is the name of the manifest of kind for hex (a snapshot), lease (a pause) or
// name (a cache).
func manifestFile(kind Kind, hex, lease, name string) (string, error) {
	switch kind {
	case KindPause:
		seg, err := segment("lease", lease)
		return "pause." + seg + ".json", err
	case KindCache:
		seg, err := segment("cache name", name)
		return "cache." + seg + ".json", err
	}
	return hex + ".json", nil
}

// encodeManifest is m's stored form.
func encodeManifest(m Manifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("snapshot manifest of %d bytes (at most %d): fewer paths or labels", len(b), maxManifest)
	}
	return b, nil
}

// decodeManifest reads a stored manifest, at most maxManifest bytes of it, and checks that it
// is one stored as file: of a kind, with an ID, and for what its file name says.
func decodeManifest(r io.Reader, file string) (Manifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
	if err != nil {
		return Manifest{}, err
	}
	if len(b) > maxManifest {
		return Manifest{}, fmt.Errorf("%w: manifest %s is over %d bytes", ErrCorrupt, file, maxManifest)
	}
	var m Manifest
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest %s does not decode: %v", ErrCorrupt, file, err)
	}
	hex, err := parseID(m.ID)
	if err != nil || !m.Kind.valid() {
		return Manifest{}, fmt.Errorf("%w: manifest %s holds no valid ID and kind", ErrCorrupt, file)
	}
	if want, err := manifestFile(m.Kind, hex, m.Lease, m.Name); err != nil || want != file {
		return Manifest{}, fmt.Errorf("%w: manifest %s describes another snapshot (%s)", ErrCorrupt, file, m.Ref())
	}
	return m, nil
}

// refTarget is what a ref names: the manifest file it is in, and for a name, the name (which
// takes a listing to find).
type refTarget struct {
	file string
	name string
}

// parseRef reads ref: an ID, "pause:LEASE", "cache:NAME", or a snapshot's name.
func parseRef(ref string) (refTarget, error) {
	switch {
	case ref == "":
		return refTarget{}, fmt.Errorf("%w: an empty ref", ErrNoSnapshot)
	case strings.HasPrefix(ref, idPrefix):
		hex, err := parseID(ref)
		if err != nil {
			return refTarget{}, fmt.Errorf("%w: %v", ErrNoSnapshot, err)
		}
		return refTarget{file: hex + ".json"}, nil
	case strings.HasPrefix(ref, pauseRefPrefix):
		file, err := manifestFile(KindPause, "", strings.TrimPrefix(ref, pauseRefPrefix), "")
		if err != nil {
			return refTarget{}, fmt.Errorf("%w: %v", ErrNoSnapshot, err)
		}
		return refTarget{file: file}, nil
	case strings.HasPrefix(ref, cacheRefPrefix):
		file, err := manifestFile(KindCache, "", "", strings.TrimPrefix(ref, cacheRefPrefix))
		if err != nil {
			return refTarget{}, fmt.Errorf("%w: %v", ErrNoSnapshot, err)
		}
		return refTarget{file: file}, nil
	}
	if err := CheckName(ref); err != nil {
		return refTarget{}, fmt.Errorf("%w: %v", ErrNoSnapshot, err)
	}
	return refTarget{name: ref}, nil
}
