package snapshot_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/snapshot"
)

// transitCatalog is a Catalog over a directory store and a real Vault's transit engine.
type transitCatalog struct {
	*snapshot.Catalog
	dir, staging string
}

func newTransitCatalog(t *testing.T, keys snapshot.Keys) *transitCatalog {
	t.Helper()
	tc := &transitCatalog{dir: filepath.Join(t.TempDir(), "store"), staging: filepath.Join(t.TempDir(), "staging")}
	store, err := snapshot.NewDir(tc.dir)
	if err != nil {
		t.Fatal(err)
	}
	tc.Catalog, err = snapshot.NewCatalog(snapshot.CatalogConfig{Store: store, Keys: keys, Staging: tc.staging})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if left, _ := os.ReadDir(tc.staging); len(left) != 0 {
			t.Errorf("the staging directory holds %d files after the test, want none", len(left))
		}
	})
	return tc
}

// path is the file of the store's object key.
func (tc *transitCatalog) path(key string) string {
	return filepath.Join(tc.dir, filepath.FromSlash(key))
}

func (tc *transitCatalog) read(t *testing.T, key string) []byte {
	t.Helper()
	b, err := os.ReadFile(tc.path(key))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (tc *transitCatalog) write(t *testing.T, key string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(tc.path(key)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tc.path(key), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// markedArchive is an archive with a line no encrypted byte would hold by chance.
func markedArchive(marker string) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 200<<10; i++ {
		b.WriteString(marker)
		b.WriteByte(byte(i))
	}
	return b.Bytes()
}

// TestCatalogTenantCopyTransit copies acme's snapshot into globex's prefix, as someone with
// write access to the store could, and edits it to look like globex's: it is never opened as
// globex's, because its data key is wrapped under acme's key in Vault.
func TestCatalogTenantCopyTransit(t *testing.T) {
	v := startTestVault(t)
	tc := newTransitCatalog(t, newTestTransit(t, v))
	ctx := context.Background()
	a := markedArchive("acme's plans for the quarter ")
	m, err := tc.Save(ctx, snapshot.Meta{Tenant: "acme", Name: "plans", Template: "python"}, bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Save(ctx, snapshot.Meta{Tenant: "globex"}, strings.NewReader("globex's own")); err != nil {
		t.Fatal(err)
	}
	_, rc, err := tc.Open(ctx, "acme", "plans")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, a) {
		t.Fatalf("acme's own snapshot: %v", err)
	}
	assertNotInClear(t, tc.dir, []byte("acme's plans"))
	assertNotInClear(t, tc.staging, []byte("acme's plans"))

	hexID := strings.TrimPrefix(m.ID, "sha256:")
	blob := tc.read(t, "tenants/acme/blobs/"+hexID)
	manifest := bytes.Replace(tc.read(t, "tenants/acme/manifests/"+hexID+".json"), []byte(`"acme"`), []byte(`"globex"`), 1)
	tc.write(t, "tenants/globex/manifests/"+hexID+".json", manifest)

	t.Run("blob as it was", func(t *testing.T) {
		tc.write(t, "tenants/globex/blobs/"+hexID, blob)
		_, _, err := tc.Open(ctx, "globex", "plans")
		if !errors.Is(err, snapshot.ErrOtherTenant) || strings.Contains(err.Error(), "acme") {
			t.Fatalf("Open as globex = %v; want ErrOtherTenant, not naming acme", err)
		}
	})
	t.Run("blob header rewritten to globex", func(t *testing.T) {
		tc.write(t, "tenants/globex/blobs/"+hexID, retenant(t, blob, "acme", "globex"))
		_, _, err := tc.Open(ctx, "globex", m.ID)
		if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "does not unwrap") || !strings.Contains(err.Error(), "Vault answered 400") {
			t.Fatalf("Open as globex = %v; want ErrCorrupt, Vault refusing to unwrap acme's key as globex's", err)
		}
	})
	t.Run("Vault down", func(t *testing.T) {
		v2 := startTestVault(t)
		c, _ := v2.Client()
		c.SetMaxRetries(0)
		keys, err := snapshot.NewTransit(snapshot.TransitConfig{Client: c})
		if err != nil {
			t.Fatal(err)
		}
		tc2 := newTransitCatalog(t, keys)
		if _, err := tc2.Save(ctx, snapshot.Meta{Tenant: "acme", Name: "x"}, bytes.NewReader(a)); err != nil {
			t.Fatal(err)
		}
		v2.Stop()
		if _, _, err := tc2.Open(ctx, "acme", "x"); !errors.Is(err, snapshot.ErrKeysDown) {
			t.Fatalf("Open with Vault down = %v; want ErrKeysDown", err)
		}
		if _, err := tc2.Save(ctx, snapshot.Meta{Tenant: "acme", Name: "y"}, bytes.NewReader(a)); !errors.Is(err, snapshot.ErrKeysDown) {
			t.Fatalf("Save with Vault down = %v; want ErrKeysDown", err)
		}
		if all, err := tc2.List(ctx, "acme"); err != nil || len(all) != 1 {
			t.Fatalf("after a failed save: %d snapshots, %v", len(all), err)
		}
	})
}

// retenant returns blob with its header's tenant from replaced by to, and its length fixed.
func retenant(t *testing.T, blob []byte, from, to string) []byte {
	t.Helper()
	const fixed = len("ALSNAP") + 3
	n := int(binary.BigEndian.Uint16(blob[len("ALSNAP")+1:]))
	header := bytes.Replace(blob[fixed:fixed+n], []byte(`"tenant":"`+from+`"`), []byte(`"tenant":"`+to+`"`), 1)
	out := append([]byte(nil), blob[:fixed]...)
	binary.BigEndian.PutUint16(out[len("ALSNAP")+1:], uint16(len(header)))
	return append(append(out, header...), blob[fixed+n:]...)
}

// assertNotInClear fails t if any file under dir holds secret.
func assertNotInClear(t *testing.T, dir string, secret []byte) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, secret) {
			t.Errorf("%s holds %q in clear", path, secret)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
