package pooltest

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/snapshot"
)

// Workspaces stands in for the sandboxes' file systems as far as snapshots go (a Runtime's
// ExecFunc): the pool's archive script writes, as a tar stream, the files a sandbox holds under
// the roots it names, and its restore script unpacks into the sandbox. Any other command runs
// nothing and succeeds.
type Workspaces struct {
	mu    sync.Mutex
	files map[string]map[string]string // sandbox id -> path relative to / -> content
}

// NewWorkspaces returns empty Workspaces.
func NewWorkspaces() *Workspaces { return &Workspaces{files: map[string]map[string]string{}} }

// Put writes content at path (relative to /: "workspace/a.txt") in sandbox.
func (w *Workspaces) Put(sandbox, path, content string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.files[sandbox] == nil {
		w.files[sandbox] = map[string]string{}
	}
	w.files[sandbox][path] = content
}

// Get returns what path holds in sandbox ("" when nothing).
func (w *Workspaces) Get(sandbox, path string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.files[sandbox][path]
}

// Exec is the runtime's ExecFunc.
func (w *Workspaces) Exec(_ context.Context, sb pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, _ io.Writer) (int, error) {
	if len(req.Cmd) < 4 || req.Cmd[0] != "sh" {
		return 0, nil
	}
	switch req.Cmd[3] {
	case "snapshot":
		w.mu.Lock()
		files := maps.Clone(w.files[sb.ID])
		w.mu.Unlock()
		tw := tar.NewWriter(stdout)
		for _, root := range req.Cmd[4:] {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: root + "/", Mode: 0o755, ModTime: time.Now(), Format: tar.FormatPAX})
			for _, p := range slices.Sorted(maps.Keys(files)) {
				if strings.HasPrefix(p, root+"/") {
					tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o644, Size: int64(len(files[p])), ModTime: time.Now(), Format: tar.FormatPAX})
					io.WriteString(tw, files[p])
				}
			}
		}
		return 0, tw.Close()
	case "restore":
		tr := tar.NewReader(stdin)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return 0, nil
			}
			if err != nil {
				return 2, err
			}
			if h.Typeflag == tar.TypeReg {
				b, _ := io.ReadAll(tr)
				w.Put(sb.ID, h.Name, string(b))
			}
		}
	}
	return 0, nil
}

// Catalog returns a catalog of snapshots in a directory store, whose data keys a real Vault's
// transit engine wraps (bin/vault, which `make test` builds), for as long as t runs.
func Catalog(t testing.TB, vaultBinary string) *snapshot.Catalog {
	t.Helper()
	return CatalogAt(t, vaultBinary, t.TempDir())
}

// CatalogAt is Catalog with its directory store at dir, for tests that tamper with it.
func CatalogAt(t testing.TB, vaultBinary, dir string) *snapshot.Catalog {
	t.Helper()
	bin, _ := filepath.Abs(vaultBinary)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run the tests with `make test`, which builds a real Vault", bin)
	}
	ctx, cancel := context.WithCancel(context.Background())
	v, err := devstack.StartVault(ctx, bin, t.TempDir())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); v.Stop() })
	vc, err := v.Client()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := snapshot.NewTransit(snapshot.TransitConfig{Client: vc})
	if err != nil {
		t.Fatal(err)
	}
	store, err := snapshot.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := snapshot.NewCatalog(snapshot.CatalogConfig{Store: store, Keys: keys, Staging: t.TempDir(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
