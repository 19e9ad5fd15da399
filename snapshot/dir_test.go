package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/snapshot"
	"github.com/airlock-dev/airlock/snapshot/storetest"
)

func newDir(t *testing.T) *snapshot.Dir {
	t.Helper()
	d, err := snapshot.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDirConformance(t *testing.T) {
	storetest.Run(t, func() snapshot.Store { return newDir(t) })
}

// The files and directories a Dir makes are its owner's alone, and a Put leaves no temporary
// file behind.
func TestDirModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	d, err := snapshot.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Put(t, d, "tenants/acme/blobs/x", []byte("data"))
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := e.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if e.IsDir() {
			want = fs.ModeDir | 0o700
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, st.Mode(), want)
		}
		if strings.Contains(e.Name(), "~") {
			t.Errorf("%s: a temporary file was left", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A temporary file of a Put in progress (or of one that crashed) is not listed, and does not
// stop a later Put of the same key.
func TestDirHidesTemporaryFiles(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	d, err := snapshot.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Put(t, d, "a/x", []byte("x"))
	if err := os.WriteFile(filepath.Join(root, "a", "~put-crashed"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Keys(t, d, ""); len(got) != 1 || got[0] != "a/x" {
		t.Fatalf("list: %q, want only a/x", got)
	}
	storetest.Put(t, d, "a/x", []byte("y"))
	if got := storetest.Get(t, d, "a/x"); string(got) != "y" {
		t.Fatalf("get: %q", got)
	}
}

// A symbolic link planted in the store's directory does not lead a Put, a Get or a List
// outside it.
func TestDirSymlinkEscape(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	d, err := snapshot.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("not the store's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "evil")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Put(ctx, "evil/planted", bytes.NewReader([]byte("x")), 1); err == nil {
		t.Error("put through a link out of the store: no error")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a put wrote outside the store: %v", err)
	}
	if rc, err := d.Get(ctx, "evil/secret"); err == nil {
		rc.Close()
		t.Error("get through a link out of the store: no error")
	}
	if _, err := d.Stat(ctx, "evil/secret"); err == nil {
		t.Error("stat through a link out of the store: no error")
	}
	if got := storetest.Keys(t, d, ""); len(got) != 0 {
		t.Errorf("list followed a link out of the store: %q", got)
	}
}

func TestDirString(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	d, err := snapshot.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.String(); got != "directory "+root {
		t.Fatalf("String: %q", got)
	}
}
