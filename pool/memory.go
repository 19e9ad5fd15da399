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
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
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

// pauseMemory pauses l keeping its memory (checkpointable said it can), as PauseWith.
//
// The lease is cut from the network first (unbound, so the gateway closes its connections and
// recognises its address no more), since stopping the sandbox gives its address back to the
// engine, which may hand it to another sandbox while the checkpoint is kept; the checkpoint
// is then taken and kept, and the pause finishes as any other. When the checkpoint fails the
// sandbox runs on as it was, and the pause keeps its files instead; when what was taken cannot
// be kept, the sandbox is restored where it was. Either way a lease whose state could not be
// kept is bound again and runs on, or, when it cannot be (its token lapsed, its sandbox does
// not answer, or came back elsewhere), is released: it is never left unbound and running.
func (k *keeper) pauseMemory(ctx context.Context, l Lease, t Template, p Paused, labels func(apitype.Kept) map[string]string, start time.Time) (Paused, error) {
	cp := k.checkpointer.(Checkpointer)
	turn, err := k.checkpoints.take(ctx)
	if err != nil {
		return Paused{}, err
	}
	defer turn()
	dir, err := k.scratchDir()
	if err != nil {
		return Paused{}, fmt.Errorf("the lease runs on, not paused: no folder for its checkpoint: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := k.table.cut(ctx, l, audit.EventPause); err != nil {
		if errors.Is(err, ErrLeaseNotFound) {
			return Paused{}, fmt.Errorf("%w: lease %s ended (released or expired) as it was being paused; nothing is kept", ErrLeaseNotFound, l.ID)
		}
		return Paused{}, err
	}
	state := filepath.Join(dir, "state")
	var m snapshot.Manifest
	// The lease's ledger reads its workspace at its end, which a stopped sandbox cannot tell.
	unrecord := k.table.recordBefore(ctx, l)
	carried := k.ops.carry(l.ID)
	if err := cp.Checkpoint(ctx, l.Sandbox, state); err != nil {
		p.Why = "the checkpoint failed, so the pause keeps the files: " + strings.ReplaceAll(err.Error(), dir, "the checkpoint's folder")
		k.ops.uncarry(l.ID)
		m, err = k.save(ctx, l, snapshot.Meta{Kind: snapshot.KindPause, Pinned: true, Labels: labels(apitype.KeptFiles)}, t.Snapshot.Paths)
		k.record(ctx, l, EventSnapshot, m, err)
		if err != nil {
			return Paused{}, k.runOn(ctx, l, unrecord, carried, fmt.Errorf("the pause could not keep the files either: %w", err))
		}
	} else {
		withProcs := labels(apitype.KeptMemory)
		for key, v := range carried {
			withProcs[key] = v
		}
		meta := snapshot.Meta{Kind: snapshot.KindPause, Pinned: true, Labels: withProcs,
			Tenant: l.Tenant, Template: t.Name, Image: l.Sandbox.Image, Lease: l.ID,
			Paths: append([]string{t.Workdir}, t.Snapshot.Paths...), MaxSize: checkpointCap(t),
			Cap: fmt.Sprintf("the checkpoint cap of template %s (memory_mb + workspace_mb + tmp_mb)", t.Name)}
		m, err = k.saveCheckpoint(ctx, meta, state)
		k.record(ctx, l, EventSnapshot, m, err)
		if err != nil {
			err = fmt.Errorf("keeping the checkpoint: %w", k.mapErr(err))
			back, rerr := cp.Restore(context.WithoutCancel(ctx), l.Sandbox, state)
			if rerr != nil {
				return Paused{}, k.release(ctx, l, fmt.Errorf("%w; and its sandbox could not be restored from the checkpoint (%v)", err, rerr))
			}
			if back.Addr != l.Sandbox.Addr {
				return Paused{}, k.release(ctx, l, fmt.Errorf("%w; and its sandbox, restored, came back at %s, not at %s", err, back.Addr, l.Sandbox.Addr))
			}
			return Paused{}, k.runOn(ctx, l, unrecord, carried, fmt.Errorf("%w (its sandbox was restored from the checkpoint; connections open then are cut)", err))
		}
		p.Kept = apitype.KeptMemory
	}
	p.Snapshot = m.ID
	// Paused: what follows is the table's to record and retry, as at a release.
	if err := k.table.finish(ctx, l, audit.EventPause, pauseNote(p), true); err != nil {
		return Paused{}, err
	}
	p.Took = time.Since(start)
	return p, nil
}

// runOn binds l again after a pause that could not keep its state (cause), so that it runs on,
// or releases it when it cannot be bound again; the error says which.
// unrecord undoes the record of its workspace taken for the pause: its end will record it.
// carried are the background processes the pause carried (their entries ended when the agent
// was cut), listed again as a resume lists them.
func (k *keeper) runOn(ctx context.Context, l Lease, unrecord func(), carried map[string]string, cause error) error {
	if err := k.table.bindAgain(ctx, l, "the pause could not keep its state, and the lease runs on: "+cause.Error()); err != nil {
		return k.release(ctx, l, fmt.Errorf("%w; and the lease could not be bound again (%v)", cause, err))
	}
	unrecord()
	k.ops.uncarry(l.ID)
	k.ops.adopt(l, carriedOf(carried))
	return fmt.Errorf("the lease runs on, not paused: %w", cause)
}

// release ends l, which cut unbound, as a release, after a pause that could not keep its state
// nor leave it running (cause).
func (k *keeper) release(ctx context.Context, l Lease, cause error) error {
	cause = fmt.Errorf("the pause failed and the lease is released: %w", cause)
	if err := k.table.finish(ctx, l, audit.EventRelease, cause.Error(), true); err != nil {
		k.log.Error("releasing a lease whose pause failed", "lease", l.ID, "err", err)
	}
	return cause
}

// checkpointCap bounds a checkpoint of a sandbox of t: its memory, and its tmpfs mounts (which
// gVisor holds in memory, counted apart here to be safe), and room for gVisor's own state.
func checkpointCap(t Template) int64 {
	return (t.MemoryMB+t.WorkspaceMB+t.TmpMB)<<20 + 64<<20
}

// checkpoints bounds how many checkpoints the node writes or unpacks at once: each is a
// sandbox's memory in the clear on the node's disk until it is stored (and the catalog stages
// it again, encrypted), so a tenant pausing many leases at once must not fill that disk.
type checkpoints chan struct{}

// maxCheckpoints is how many checkpoints a node handles at once.
const maxCheckpoints = 2

// take waits for a turn, as long as ctx allows; done gives it back.
func (c checkpoints) take(ctx context.Context) (done func(), err error) {
	select {
	case c <- struct{}{}:
		return func() { <-c }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for one of the node's %d checkpoints under way to end: %w", maxCheckpoints, ctx.Err())
	}
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
		// Strictly: a checkpoint restores only into the image it was taken on.
		if sb.Image != m.Image {
			return Restored{}, fmt.Errorf("%w: lease %s was paused on image %q of template %s, which its sandboxes no longer run (they run %s), and its memory restores only into the same image",
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
		// What the checkpoint ran runs again from the moment it is restored, before the lease
		// is bound: never at an address another lease is still bound to (a sandbox that
		// stopped gave it back to the engine a moment before its lease was unbound).
		if b, err := k.table.binder.Lookup(ctx, sb.Addr); !errors.Is(err, binding.ErrUnknown) {
			if err == nil {
				err = fmt.Errorf("it is bound to lease %s", b.Lease)
			}
			return Restored{}, fmt.Errorf("the warm sandbox's address %s cannot take a checkpoint now: %w", sb.Addr, err)
		}
		turn, err := k.checkpoints.take(ctx)
		if err != nil {
			return Restored{}, err
		}
		defer turn()
		dir, err := k.scratchDir()
		if err != nil {
			return Restored{}, err
		}
		defer os.RemoveAll(dir)
		files, size, err := unpackCheckpoint(body, dir, checkpointCap(t))
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
