package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSaveOpenRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1000, 3*ChunkSize + 5} {
		t.Run(fmt.Sprint(n, " bytes"), func(t *testing.T) {
			tc := newTestCatalog(t, nil, Retention{})
			a := randomArchive("round", n)
			m, err := tc.Save(context.Background(), Meta{Tenant: "acme", Name: "first", Template: "python", Image: "sha256:img",
				Lease: "l-1", Paths: []string{"/workspace"}, Labels: map[string]string{"k": "v"}, Files: func() int { return 7 }}, bytes.NewReader(a))
			if err != nil {
				t.Fatal(err)
			}
			hexID := strings.TrimPrefix(idOf(a), "sha256:")
			want := Manifest{ID: idOf(a), Name: "first", Tenant: "acme", Template: "python", Image: "sha256:img", Lease: "l-1",
				Kind: KindSnapshot, Created: tc.clock.Now(), Size: int64(n), Stored: int64(len(tc.store.bytes("tenants/acme/blobs/" + hexID))),
				Files: 7, Paths: []string{"/workspace"}, Labels: map[string]string{"k": "v"}}
			if !manifestsEqual(m, want) {
				t.Fatalf("Save = %+v\nwant %+v", m, want)
			}
			if keys := tc.store.keys(); !slices.Equal(keys, []string{"tenants/acme/blobs/" + hexID, "tenants/acme/manifests/" + hexID + ".json"}) {
				t.Fatalf("store holds %v", keys)
			}
			if n >= 64 && bytes.Contains(tc.store.bytes("tenants/acme/blobs/"+hexID), a[:64]) {
				t.Fatal("the blob holds the archive in clear")
			}
			for _, ref := range []string{m.ID, "first"} {
				got, rc, err := tc.Open(context.Background(), "acme", ref)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil || !bytes.Equal(b, a) || !manifestsEqual(got, want) {
					t.Fatalf("Open(%s): %d bytes, %v, %+v", ref, len(b), err, got)
				}
			}
		})
	}
}

func manifestsEqual(a, b Manifest) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestSaveSameArchiveTwice(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	ctx := context.Background()
	a := randomArchive("same", 5000)
	first, err := tc.Save(ctx, Meta{Tenant: "acme", Name: "one", Lease: "l-1", Pinned: true}, bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	blob := "tenants/acme/blobs/" + strings.TrimPrefix(first.ID, "sha256:")
	stored := tc.store.bytes(blob)
	tc.clock.Add(time.Minute)
	second, err := tc.Save(ctx, Meta{Tenant: "acme", Name: "two", Lease: "l-2"}, bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if tc.store.puts[blob] != 1 || !bytes.Equal(tc.store.bytes(blob), stored) {
		t.Fatalf("the blob was stored %d times; want once (content addressing)", tc.store.puts[blob])
	}
	if second.ID != first.ID || second.Name != "two" || second.Lease != "l-2" || !second.Created.Equal(tc.clock.Now()) ||
		!second.Pinned || second.Stored != int64(len(stored)) {
		t.Fatalf("the second save = %+v; want the snapshot saved anew under its new name, still pinned, its stored size the blob's", second)
	}
	if _, err := tc.Get(ctx, "acme", "one"); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("the old name still names it: %v", err)
	}
	if b, err := tc.open("acme", "two"); err != nil || !bytes.Equal(b, a) {
		t.Fatalf("open after the second save: %v", err)
	}
	// A save with no name keeps the name it had.
	if third, err := tc.Save(ctx, Meta{Tenant: "acme"}, bytes.NewReader(a)); err != nil || third.Name != "two" {
		t.Fatalf("an unnamed save of a named snapshot = %+v, %v; want it still named two", third, err)
	}
	// Another tenant's save of the same archive is stored again, under its own key.
	if _, err := tc.Save(ctx, Meta{Tenant: "globex"}, bytes.NewReader(a)); err != nil {
		t.Fatal(err)
	}
	if tc.store.puts["tenants/globex/blobs/"+strings.TrimPrefix(first.ID, "sha256:")] != 1 {
		t.Fatal("globex's save was not stored")
	}
}

// TestSaveOverAForeignBlob: a blob planted under the tenant's prefix (sealed for another
// tenant) is not taken for the tenant's own; the save stores its own over it.
func TestSaveOverAForeignBlob(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	a := randomArchive("planted", 5000)
	m := tc.save(t, "globex", "", a)
	hexID := strings.TrimPrefix(m.ID, "sha256:")
	tc.store.set("tenants/acme/blobs/"+hexID, tc.store.bytes("tenants/globex/blobs/"+hexID))
	tc.save(t, "acme", "", a)
	if b, err := tc.open("acme", m.ID); err != nil || !bytes.Equal(b, a) {
		t.Fatalf("acme's snapshot over a planted blob: %v", err)
	}
}

func TestRefs(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	ctx := context.Background()
	a, b, c := randomArchive("a", 100), randomArchive("b", 100), randomArchive("c", 100)
	tc.save(t, "acme", "build", a)
	tc.clock.Add(time.Second)
	tc.save(t, "acme", "build", b) // the newest with the name
	tc.clock.Add(time.Second)
	pause, err := tc.Save(ctx, Meta{Tenant: "acme", Kind: KindPause, Lease: "l-9", Pinned: true}, bytes.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := tc.Save(ctx, Meta{Tenant: "acme", Kind: KindCache, Name: "pip/python"}, bytes.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	if pause.Ref() != "pause:l-9" || cache.Ref() != "cache:pip/python" {
		t.Fatalf("refs %q, %q", pause.Ref(), cache.Ref())
	}
	for _, tt := range []struct {
		ref  string
		want []byte // nil: ErrNoSnapshot
	}{
		{"build", b},
		{idOf(a), a},
		{idOf(b), b},
		{"pause:l-9", c},
		{"cache:pip/python", c},
		// An ID names the tenant's snapshot of that archive, never a pause or cache holding it.
		{idOf(c), nil},
		{"pause:l-8", nil},
		{"cache:pip", nil},
		{"nothing", nil},
		{"sha256:" + strings.Repeat("0", 64), nil},
		{"sha256:ABC", nil},
		{"", nil},
	} {
		got, err := tc.open("acme", tt.ref)
		if tt.want == nil && !errors.Is(err, ErrNoSnapshot) || tt.want != nil && (err != nil || !bytes.Equal(got, tt.want)) {
			t.Errorf("open %q: %v", tt.ref, err)
		}
	}
	if _, err := tc.Get(ctx, "globex", "build"); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("globex sees acme's snapshot: %v", err)
	}
	all, err := tc.List(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, m := range all {
		refs = append(refs, m.Ref())
	}
	if want := []string{"cache:pip/python", "pause:l-9", idOf(b), idOf(a)}; !slices.Equal(refs, want) {
		t.Fatalf("List = %v, want newest first %v", refs, want)
	}
}

func TestSaveRefusesBadMeta(t *testing.T) {
	for _, tt := range []struct {
		name string
		meta Meta
		want string
	}{
		{"no tenant", Meta{}, "tenant: empty"},
		{"unknown kind", Meta{Tenant: "acme", Kind: "backup"}, `kind "backup"`},
		{"pause without lease", Meta{Tenant: "acme", Kind: KindPause}, "a pause needs its lease"},
		{"cache without name", Meta{Tenant: "acme", Kind: KindCache}, "a cache needs a name"},
		{"name like an ID", Meta{Tenant: "acme", Name: "sha256:x"}, `begins with "sha256:"`},
		{"name like a pause", Meta{Tenant: "acme", Name: "pause:l-1"}, `begins with "pause:"`},
		{"name with a newline", Meta{Tenant: "acme", Name: "a\nb"}, "unprintable"},
		{"long name", Meta{Tenant: "acme", Name: strings.Repeat("n", 129)}, "longer than 128"},
		{"long tenant", Meta{Tenant: strings.Repeat("T", 101)}, "longer than 100"},
		{"negative cap", Meta{Tenant: "acme", MaxSize: -1}, "max size"},
		{"too many paths", Meta{Tenant: "acme", Paths: make([]string, 65)}, "65 paths"},
		{"empty path", Meta{Tenant: "acme", Paths: []string{""}}, "a path of 0 bytes"},
		{"long label", Meta{Tenant: "acme", Labels: map[string]string{"k": strings.Repeat("v", 1025)}}, `label "k"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCatalog(t, nil, Retention{})
			read := false
			_, err := tc.Save(context.Background(), tt.meta, readerFunc(func([]byte) (int, error) { read = true; return 0, io.EOF }))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Save = %v; want %q", err, tt.want)
			}
			if read || len(tc.store.keys()) != 0 {
				t.Fatal("a refused save read its archive or stored something")
			}
		})
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func TestSaveTooBig(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	const max = 1 << 20
	a := randomArchive("big", 3*max)
	src := &countReader{r: bytes.NewReader(a)}
	_, err := tc.Save(context.Background(), Meta{Tenant: "acme", Template: "python", MaxSize: max, Cap: "snapshot.max_mb of template python"}, src)
	var big *TooBig
	if !errors.As(err, &big) || big.Max != max {
		t.Fatalf("Save = %v; want *TooBig", err)
	}
	for _, want := range []string{"more than 1048576 bytes (1 MiB)", "snapshot.max_mb of template python"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if src.n > max+1 {
		t.Errorf("Save read %d bytes of the archive; it stops at the cap (%d) and one more", src.n, max)
	}
	if k := tc.store.keys(); len(k) != 0 {
		t.Fatalf("a refused save stored %v", k)
	}
	// Exactly the cap is within it; the default setting names the template.
	if _, err := tc.Save(context.Background(), Meta{Tenant: "acme", MaxSize: max}, bytes.NewReader(a[:max])); err != nil {
		t.Fatalf("an archive of exactly the cap: %v", err)
	}
	_, err = tc.Save(context.Background(), Meta{Tenant: "acme", Template: "node", MaxSize: max + max/2}, bytes.NewReader(a))
	if err == nil || !strings.Contains(err.Error(), "more than 1572864 bytes (1.5 MiB)") || !strings.Contains(err.Error(), "template node") {
		t.Fatalf("default cap setting: %v", err)
	}
}

type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestSaveStoreDown: a store that fails a Put fails the Save with its error (ErrStoreDown),
// naming the store, and nothing of the save is left: not in the store, not in staging.
func TestSaveStoreDown(t *testing.T) {
	ctx := context.Background()
	down := func(key string) error { return fmt.Errorf("put %s: %w (connection refused)", key, ErrStoreDown) }
	for _, tt := range []struct {
		name string
		fail string // the kind of key whose Put fails
	}{
		{"blob", "/blobs/"},
		{"manifest", "/manifests/"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCatalog(t, nil, Retention{})
			tc.store.failPut = func(key string) error {
				if strings.Contains(key, tt.fail) {
					return down(key)
				}
				return nil
			}
			_, err := tc.Save(ctx, Meta{Tenant: "acme"}, bytes.NewReader(randomArchive("down", 200000)))
			if !errors.Is(err, ErrStoreDown) || !strings.Contains(err.Error(), "memory store") {
				t.Fatalf("Save = %v; want ErrStoreDown naming the store", err)
			}
			if k := tc.store.keys(); len(k) != 0 {
				t.Fatalf("a failed save left %v", k)
			}
		})
	}
	t.Run("manifest, blob held before", func(t *testing.T) {
		tc := newTestCatalog(t, nil, Retention{})
		a := randomArchive("held", 1000)
		tc.save(t, "acme", "kept", a)
		tc.store.failPut = down
		if _, err := tc.Save(ctx, Meta{Tenant: "acme", Name: "again"}, bytes.NewReader(a)); !errors.Is(err, ErrStoreDown) {
			t.Fatalf("Save = %v", err)
		}
		if b, err := tc.open("acme", "kept"); err != nil || !bytes.Equal(b, a) {
			t.Fatalf("a failed save took the snapshot it would have refreshed: %v", err)
		}
	})
}

func TestSaveCancelled(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	src := readerFunc(func(p []byte) (int, error) {
		if n++; n == 3 {
			cancel()
		}
		return copy(p, randomArchive("c", len(p))), nil
	})
	if _, err := tc.Save(ctx, Meta{Tenant: "acme"}, src); !errors.Is(err, context.Canceled) {
		t.Fatalf("Save = %v; want context.Canceled", err)
	}
	if k := tc.store.keys(); len(k) != 0 {
		t.Fatalf("a cancelled save left %v", k)
	}
}

// TestOpenDoesNotVerify: a blob of the tenant's other archive put in the place of a
// snapshot's opens (its chunks authenticate), but its reader fails at the end.
func TestOpenDoesNotVerify(t *testing.T) {
	for _, tt := range []struct {
		name  string
		sizeB int
		want  string
	}{
		{"same size", 5000, "hashes to sha256:"},
		{"larger", 9000, "holds more than the 5000 bytes"},
		{"smaller", 3000, "(3000 bytes) hashes to"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCatalog(t, nil, Retention{})
			a, b := randomArchive("a", 5000), randomArchive("b", tt.sizeB)
			ma, mb := tc.save(t, "acme", "a", a), tc.save(t, "acme", "b", b)
			tc.store.set("tenants/acme/blobs/"+strings.TrimPrefix(ma.ID, "sha256:"), tc.store.bytes("tenants/acme/blobs/"+strings.TrimPrefix(mb.ID, "sha256:")))
			_, rc, err := tc.Open(context.Background(), "acme", "a")
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			_, err = io.ReadAll(rc)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "does not verify") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("reading to the end = %v; want ErrCorrupt, does not verify, %q", err, tt.want)
			}
			if _, err := rc.Read(make([]byte, 10)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("a read after the failure = %v; want the failure again", err)
			}
		})
	}
}

func TestOpenTampered(t *testing.T) {
	a := randomArchive("t", 3*ChunkSize)
	for _, tt := range []struct {
		name   string
		tamper func(blob []byte) []byte
	}{
		{"header", func(b []byte) []byte { b[3] ^= 1; return b }},
		{"wrapped key", func(b []byte) []byte { b[bytes.Index(b, []byte(`"key":"`))+12] ^= 1; return b }},
		{"chunk", func(b []byte) []byte { b[len(b)-ChunkSize] ^= 1; return b }},
		{"cut short", func(b []byte) []byte { return b[:len(b)-ChunkSize/2] }},
		{"cut at a chunk", func(b []byte) []byte { return b[:headerLen(b)+2*sealed] }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCatalog(t, nil, Retention{})
			m := tc.save(t, "acme", "", a)
			key := "tenants/acme/blobs/" + strings.TrimPrefix(m.ID, "sha256:")
			tc.store.set(key, tt.tamper(tc.store.bytes(key)))
			got, err := tc.open("acme", m.ID)
			if !errors.Is(err, ErrCorrupt) || !bytes.HasPrefix(a, got) {
				t.Fatalf("open = %v after %d bytes; want ErrCorrupt", err, len(got))
			}
		})
	}
}

// TestOpenOtherTenant copies acme's snapshot into globex's prefix, as someone with the store's
// write access could: it is refused whether its manifest still names acme or is edited to name
// globex. (Against Vault's transit engine: TestCatalogTenantCopyTransit.)
func TestOpenOtherTenant(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	ctx := context.Background()
	tc.save(t, "globex", "", randomArchive("g", 10)) // globex has a key of its own
	a := randomArchive("secret", 5000)
	m := tc.save(t, "acme", "plans", a)
	hexID := strings.TrimPrefix(m.ID, "sha256:")
	tc.store.set("tenants/globex/blobs/"+hexID, tc.store.bytes("tenants/acme/blobs/"+hexID))
	manifest := tc.store.bytes("tenants/acme/manifests/" + hexID + ".json")
	tc.store.set("tenants/globex/manifests/"+hexID+".json", manifest)

	if _, err := tc.open("globex", m.ID); !errors.Is(err, ErrOtherTenant) || strings.Contains(err.Error(), "acme") {
		t.Fatalf("copied as it was: %v; want ErrOtherTenant, not naming acme", err)
	}
	if all, _ := tc.List(ctx, "globex"); len(all) != 1 {
		t.Fatalf("globex lists %d snapshots; want its own only", len(all))
	}
	tc.store.set("tenants/globex/manifests/"+hexID+".json", bytes.Replace(manifest, []byte(`"acme"`), []byte(`"globex"`), 1))
	_, err := tc.open("globex", "plans")
	if !errors.Is(err, ErrOtherTenant) || strings.Contains(err.Error(), "acme") {
		t.Fatalf("copied with its manifest edited: %v; want ErrOtherTenant, not naming acme", err)
	}
}

func TestListSkipsBadManifests(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	m := tc.save(t, "acme", "good", randomArchive("good", 10))
	hexID := strings.TrimPrefix(m.ID, "sha256:")
	good := tc.store.bytes("tenants/acme/manifests/" + hexID + ".json")
	other := strings.Repeat("ab", 32)
	tc.store.set("tenants/acme/manifests/"+other+".json", good) // says it is hexID
	tc.store.set("tenants/acme/manifests/pause.l-1.json", []byte("{not json"))
	tc.store.set("tenants/acme/manifests/"+strings.Repeat("cd", 32)+".json", bytes.Repeat([]byte(" "), maxManifest+1))
	all, err := tc.List(context.Background(), "acme")
	if err != nil || len(all) != 1 || all[0].ID != m.ID {
		t.Fatalf("List = %v, %v; want the good one only", all, err)
	}
	if _, err := tc.Get(context.Background(), "acme", "sha256:"+other); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a manifest stored under another's ID = %v; want ErrCorrupt", err)
	}
}

// TestPausesAndSnapshotsShareBlobs: a snapshot and two pauses of one archive are three
// manifests of one blob, deleted one at a time; the blob goes with the last.
func TestPausesAndSnapshotsShareBlobs(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	ctx := context.Background()
	a := randomArchive("shared", 2000)
	m := tc.save(t, "acme", "mine", a)
	for _, lease := range []string{"l-1", "l-2"} {
		if _, err := tc.Save(ctx, Meta{Tenant: "acme", Kind: KindPause, Lease: lease, Pinned: true}, bytes.NewReader(a)); err != nil {
			t.Fatal(err)
		}
	}
	blob := "tenants/acme/blobs/" + strings.TrimPrefix(m.ID, "sha256:")
	if len(tc.store.keys()) != 4 || tc.store.puts[blob] != 1 {
		t.Fatalf("store holds %v", tc.store.keys())
	}
	if got, err := tc.Get(ctx, "acme", m.ID); err != nil || got.Kind != KindSnapshot || got.Name != "mine" {
		t.Fatalf("the snapshot after two pauses of its archive: %+v, %v", got, err)
	}
	for i, ref := range []string{"pause:l-1", m.ID, "pause:l-2"} {
		if b, err := tc.open("acme", ref); err != nil || !bytes.Equal(b, a) {
			t.Fatalf("open %s: %v", ref, err)
		}
		if err := tc.Delete(ctx, "acme", ref); err != nil {
			t.Fatal(err)
		}
		if _, err := tc.Get(ctx, "acme", ref); !errors.Is(err, ErrNoSnapshot) {
			t.Fatalf("after deleting %s: %v", ref, err)
		}
		if kept := slices.Contains(tc.store.keys(), blob); kept != (i < 2) {
			t.Fatalf("after deleting %s the blob is kept: %v", ref, kept)
		}
	}
	if k := tc.store.keys(); len(k) != 0 {
		t.Fatalf("left %v", k)
	}
	if err := tc.Delete(ctx, "acme", m.ID); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("deleting again = %v", err)
	}
}

func TestCacheReplaced(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	ctx := context.Background()
	v1, v2 := randomArchive("v1", 100), randomArchive("v2", 100)
	for _, a := range [][]byte{v1, v2} {
		if _, err := tc.Save(ctx, Meta{Tenant: "acme", Kind: KindCache, Name: "pip"}, bytes.NewReader(a)); err != nil {
			t.Fatal(err)
		}
	}
	hex2 := strings.TrimPrefix(idOf(v2), "sha256:")
	if k := tc.store.keys(); !slices.Equal(k, []string{"tenants/acme/blobs/" + hex2, "tenants/acme/manifests/cache.pip.json"}) {
		t.Fatalf("after writing the cache back, the store holds %v; want its new version only", k)
	}
	if b, err := tc.open("acme", "cache:pip"); err != nil || !bytes.Equal(b, v2) {
		t.Fatalf("open cache: %v", err)
	}
}

func TestConcurrentSaves(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{MaxCount: 4})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			// Half of them save an archive another one saves too.
			_, err := tc.Save(context.Background(), Meta{Tenant: "acme"}, bytes.NewReader(randomArchive(fmt.Sprint(i%8), 70000)))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	all, err := tc.List(context.Background(), "acme")
	if err != nil || len(all) != 4 {
		t.Fatalf("List = %d, %v; want 4 (retention)", len(all), err)
	}
	for _, m := range all {
		if _, err := tc.open("acme", m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tc.store.keys()); n != 8 {
		t.Fatalf("the store holds %d objects; want 4 blobs and 4 manifests", n)
	}
}
