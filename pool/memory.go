package pool

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/snapshot"
)

// A pause that keeps memory stores a checkpoint of the sandbox (Checkpointer) instead of an
// archive of its files: under gVisor the workspace and the other writable paths are memory
// too, so the checkpoint holds them as well. Its blob is a tar of the checkpoint's files, all
// regular and at the top level, where an archive of files holds only entries under the
// template's roots: each form is refused where the other is expected (unpackCheckpoint, and the
// filter's roots), so what the unsigned manifest says of a pause's form cannot make a tenant's
// files reach runsc as a checkpoint.

// labelForm is the pause label that says its state is a checkpoint (formCheckpoint).
const (
	labelForm      = "form"
	formCheckpoint = "checkpoint"
)

// maxCheckpointFiles bounds the files a checkpoint's archive may hold (runsc writes three).
const maxCheckpointFiles = 64

// checkpointName is the form of a checkpoint file's name (runsc's: checkpoint.img, pages.img,
// pages_meta.img).
var checkpointName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// checkpointable says why a pause of a lease of t that asks for memory keeps files only, or is
// "" when it can keep memory. keep is the pause's Keep: such a pause may become a snapshot, which
// holds files, so it keeps files.
func (k *keeper) checkpointable(ctx context.Context, t Template, keep bool) string {
	cp, ok := k.checkpointer.(Checkpointer)
	switch {
	case !ok:
		return t.EngineRuntime() + ": this node's runtime cannot checkpoint a sandbox, so a pause keeps the files only"
	case !t.Snapshot.Memory:
		if can, why := cp.CanCheckpoint(ctx, t); !can {
			return why
		}
		return fmt.Sprintf("template %s does not keep memory across a pause (snapshot.memory): its commands are started by exec, "+
			"and a checkpoint's restore ends every process an exec started, so a pause keeps the workspace and declared paths", t.Name)
	case keep:
		return "the pause asks to be kept as a snapshot should the lease expire paused, and a snapshot holds files, not memory: " +
			"it keeps the files (pause without keep to keep memory)"
	}
	if can, why := cp.CanCheckpoint(ctx, t); !can {
		return why
	}
	return ""
}

// pauseMemory checkpoints l's sandbox and keeps the checkpoint in the catalog with meta, as the
// state of l's pause. why is set when no checkpoint was taken: l runs on as it was, and the
// pause keeps its files instead. err is set when a checkpoint was taken and could not be kept:
// l's sandbox is then restored where it was (its processes with it; the connections open at
// the checkpoint are cut) and runs on, not paused, or, when that fails too, l is released.
func (k *keeper) pauseMemory(ctx context.Context, l Lease, t Template, meta snapshot.Meta) (m snapshot.Manifest, why string, err error) {
	cp := k.checkpointer.(Checkpointer)
	dir, err := k.scratchDir()
	if err != nil {
		return snapshot.Manifest{}, "no folder for the checkpoint: " + err.Error(), nil
	}
	defer os.RemoveAll(dir)
	state := filepath.Join(dir, "state")
	if err := cp.Checkpoint(ctx, l.Sandbox, state); err != nil {
		return snapshot.Manifest{}, "the checkpoint failed, so the pause keeps the files: " + err.Error(), nil
	}
	meta.Tenant, meta.Template, meta.Image, meta.Lease = l.Tenant, t.Name, l.Sandbox.Image, l.ID
	meta.Paths = append([]string{t.Workdir}, t.Snapshot.Paths...)
	meta.MaxSize = (t.MemoryMB+t.WorkspaceMB+t.TmpMB)<<20 + 64<<20
	meta.Cap = fmt.Sprintf("the checkpoint cap of template %s (memory_mb + workspace_mb + tmp_mb)", t.Name)
	m, err = k.saveCheckpoint(ctx, meta, state)
	if err == nil {
		return m, "", nil
	}
	err = fmt.Errorf("keeping the checkpoint: %w", k.mapErr(err))
	back, rerr := cp.Restore(context.WithoutCancel(ctx), l.Sandbox, state)
	if rerr == nil && back.Addr == l.Sandbox.Addr {
		return snapshot.Manifest{}, "", fmt.Errorf("the lease runs on, not paused (its sandbox was restored from the checkpoint; connections open then are cut): %w", err)
	}
	if rerr == nil {
		rerr = fmt.Errorf("it came back at %s, not at its bound address %s", back.Addr, l.Sandbox.Addr)
	}
	if eerr := k.table.end(ctx, l, audit.EventRelease); eerr != nil {
		k.log.Error("releasing a lease whose pause failed and whose sandbox did not come back", "lease", l.ID, "err", eerr)
	}
	return snapshot.Manifest{}, "", fmt.Errorf("%w; its sandbox could not be restored from the checkpoint (%v), so the lease is released", err, rerr)
}

// scratchDir makes a folder, the node's only, for one checkpoint on its way to or from the
// catalog (the sandbox's memory, in the clear): the caller removes it.
func (k *keeper) scratchDir() (string, error) {
	if k.scratch != "" {
		if err := os.MkdirAll(k.scratch, 0o700); err != nil {
			return "", err
		}
	}
	return os.MkdirTemp(k.scratch, "checkpoint-")
}

// saveCheckpoint archives the checkpoint's files in dir into the catalog with meta.
func (k *keeper) saveCheckpoint(ctx context.Context, meta snapshot.Meta, dir string) (snapshot.Manifest, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return snapshot.Manifest{}, err
	}
	var names []string
	for _, e := range ents {
		if !e.Type().IsRegular() || !checkpointName.MatchString(e.Name()) {
			return snapshot.Manifest{}, fmt.Errorf("the checkpoint holds %q, which is not a file a checkpoint is made of", e.Name())
		}
		names = append(names, e.Name())
	}
	if len(names) == 0 || len(names) > maxCheckpointFiles {
		return snapshot.Manifest{}, fmt.Errorf("the checkpoint holds %d files", len(names))
	}
	sort.Strings(names)
	meta.Files = func() int { return len(names) }
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeCheckpoint(pw, dir, names))
	}()
	m, err := k.catalog.Save(ctx, meta, pr)
	pr.CloseWithError(errors.New("the checkpoint was not kept"))
	return m, err
}

// writeCheckpoint writes dir's files names as a tar to w.
func writeCheckpoint(w io.Writer, dir string, names []string) error {
	tw := tar.NewWriter(w)
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err == nil {
			// Nothing of the node's (owner, times) goes into the archive: the same checkpoint
			// is the same archive.
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: fi.Size(), Format: tar.FormatPAX})
		}
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// unpackCheckpoint writes the checkpoint archive body into dir, reading body to its end (where
// the catalog checks its digest). Anything but regular files at the top level, named as a
// checkpoint's are, is refused: an archive of files is not a checkpoint.
func unpackCheckpoint(body io.Reader, dir string, maxBytes int64) (files int, size int64, err error) {
	tr := tar.NewReader(body)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return files, size, fmt.Errorf("%w: the checkpoint's archive: %v", snapshot.ErrCorrupt, err)
		}
		if h.Typeflag != tar.TypeReg || !checkpointName.MatchString(h.Name) {
			return files, size, fmt.Errorf("%w: the pause's archive holds %q (type %q), which is not a file a checkpoint is made of", snapshot.ErrCorrupt, h.Name, h.Typeflag)
		}
		if files++; files > maxCheckpointFiles {
			return files, size, fmt.Errorf("%w: the checkpoint's archive holds more than %d files", snapshot.ErrCorrupt, maxCheckpointFiles)
		}
		if size += h.Size; h.Size < 0 || size > maxBytes {
			return files, size, fmt.Errorf("%w: the checkpoint holds more than %d bytes", snapshot.ErrCorrupt, maxBytes)
		}
		f, err := os.OpenFile(filepath.Join(dir, h.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return files, size, err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return files, size, err
		}
	}
	if files == 0 {
		return 0, 0, fmt.Errorf("%w: the checkpoint's archive is empty", snapshot.ErrCorrupt)
	}
	// The catalog checks the digest once the body is read to its end.
	return files, size, drain(body, "the checkpoint's archive")
}

// checkpointRestorer restores pause m, a checkpoint, into a claimed warm sandbox of its
// template: its processes come back with their memory, its files with them.
func (k *keeper) checkpointRestorer(m snapshot.Manifest) func(context.Context, Template, Sandbox) (Restored, error) {
	return func(ctx context.Context, t Template, sb Sandbox) (Restored, error) {
		start := time.Now()
		if m.Image != "" && sb.Image != "" && sb.Image != m.Image {
			return Restored{}, fmt.Errorf("%w: lease %s was paused on image %s of template %s, which its sandboxes no longer run (they run %s), and its memory restores only into the same image",
				ErrImageGone, m.Lease, m.Image, t.Name, sb.Image)
		}
		cp, ok := k.checkpointer.(Checkpointer)
		if !ok {
			return Restored{}, fmt.Errorf("%w: lease %s was paused with its memory, and this node's runtime cannot restore a checkpoint", ErrCannotCheckpoint, m.Lease)
		}
		if !t.Snapshot.Memory {
			return Restored{}, fmt.Errorf("%w: lease %s was paused with its memory, and template %s no longer keeps memory (snapshot.memory), so its sandboxes cannot take the checkpoint",
				ErrCannotCheckpoint, m.Lease, t.Name)
		}
		got, body, err := k.catalog.Open(ctx, m.Tenant, m.Ref())
		if err != nil {
			return Restored{}, k.mapErr(err)
		}
		defer body.Close()
		dir, err := k.scratchDir()
		if err != nil {
			return Restored{}, err
		}
		defer os.RemoveAll(dir)
		files, size, err := unpackCheckpoint(body, dir, (t.MemoryMB+t.WorkspaceMB+t.TmpMB)<<20+64<<20)
		if err != nil {
			return Restored{}, k.mapErr(err)
		}
		back, err := cp.Restore(ctx, sb, dir)
		if err != nil {
			return Restored{}, err
		}
		return Restored{Snapshot: got.ID, Files: files, Size: size, Took: time.Since(start), Kept: apitype.KeptMemory, sandbox: &back}, nil
	}
}
