package pool

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// The ledger: what each lease ran and what it touched. Exec records carry each stream's size,
// hash and head (taps); uploads are remembered per lease; at the end of a lease, before its
// sandbox is destroyed, the workspace is read once as a tar stream and what changed from what
// the tenant put in it is recorded, file by file.

// Ledger bounds.
const (
	// MaxWorkspaceChanges bounds the change records written when a lease ends; the rest are
	// counted in the summary record.
	MaxWorkspaceChanges = 10000
	// MaxGivenFiles bounds the files remembered per lease as put there by the tenant (single
	// uploads and the members of uploaded archives).
	MaxGivenFiles = 40000
	// workspaceReadTimeout bounds reading the workspace at the end of a lease.
	workspaceReadTimeout = 60 * time.Second
)

// Workspace change events (KindFile records written at the end of a lease).
const (
	EventCreated   audit.Event = "workspace-created"
	EventModified  audit.Event = "workspace-modified"
	EventDeleted   audit.Event = "workspace-deleted"
	EventWorkspace audit.Event = "workspace" // the summary: counts, and anything that stopped the reading
)

// taps measures the three streams of one command.
type taps struct {
	in, out, err *audit.Tap
}

func (op *sandboxOps) newTaps(stdin bool) taps {
	t := taps{out: audit.NewTap(op.outputHead), err: audit.NewTap(op.outputHead)}
	if stdin {
		t.in = audit.NewTap(0) // what a command read is measured, never kept
	}
	return t
}

// fill puts what the taps measured into rec, each head through the lease's redaction.
func (t taps) fill(op *sandboxOps, lease string, rec *audit.Record) {
	redact := func(s string) string {
		if op.redact == nil {
			return s
		}
		return op.redact(lease, s)
	}
	if t.in != nil {
		rec.Stdin = t.in.Stream(nil)
	}
	rec.Stdout, rec.Stderr = t.out.Stream(redact), t.err.Stream(redact)
}

// given remembers a file the tenant put in a lease's workspace (by upload, or as a member of an
// uploaded archive), so the end of the lease tells it from what the lease's commands wrote.
func (op *sandboxOps) given(lease string, files ...FileInfo) {
	op.procMu.Lock()
	defer op.procMu.Unlock()
	g := op.uploads[lease]
	if g == nil {
		g = map[string]FileInfo{}
		op.uploads[lease] = g
	}
	for _, f := range files {
		if _, ok := g[f.Path]; !ok && len(g) >= MaxGivenFiles {
			return
		}
		g[f.Path] = f
	}
}

// tarFiles reads a tar stream and returns each regular file's path (under dir), size and
// SHA-256, and each link's path and target (in To: a link carries no data, but where it leads is
// what a sandbox would use one for), at most limit of them; it always reads r to its end, so a writer feeding it through a
// pipe never blocks on it.
func tarFiles(r io.Reader, dir string, limit int) (files []FileInfo, more int, err error) {
	defer io.Copy(io.Discard, r)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, more, nil
		}
		if err != nil {
			return files, more, err
		}
		link := h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink
		if h.Typeflag != tar.TypeReg && !link {
			continue
		}
		if len(files) >= limit {
			more++
			continue
		}
		p := path.Join(dir, path.Clean("/"+h.Name))
		if link {
			files = append(files, FileInfo{Path: p, To: h.Linkname})
			continue
		}
		sum := sha256.New()
		n, err := io.Copy(sum, tr)
		if err != nil {
			return files, more, err
		}
		files = append(files, FileInfo{Path: p, Size: n, SHA256: hex.EncodeToString(sum.Sum(nil))})
	}
}

// recordWorkspace reads l's workspace (as the sandbox user, the way an archive download does)
// and records each file created, modified or deleted relative to what the tenant put there, and
// a summary. The workspace starts empty (a tmpfs), so what is left is what the lease's uploads
// and commands made. It runs before the sandbox is destroyed; failing, it says so in the summary
// and the lease still ends.
func (op *sandboxOps) recordWorkspace(ctx context.Context, l Lease) {
	op.procMu.Lock()
	given := op.uploads[l.ID]
	delete(op.uploads, l.ID)
	op.procMu.Unlock()
	t, ok := op.templates[l.Template]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, workspaceReadTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	type read struct {
		files []FileInfo
		more  int
		err   error
	}
	done := make(chan read, 1)
	go func() {
		files, more, err := tarFiles(pr, t.Workdir, MaxWorkspaceChanges*2)
		done <- read{files, more, err}
	}()
	var stderr strings.Builder
	code, err := op.runtime.Exec(ctx, l.Sandbox, ExecRequest{Cmd: confined(t.Workdir,
		`airlock_full "$1"; exec tar -c --warning=no-file-changed --warning=no-file-removed -C "$1" .`, t.Workdir)}, nil, pw, &stderr)
	pw.Close()
	got := <-done
	// tar exits 1 when a file changed or went while it read it: what runs on in the sandbox (a
	// pause that keeps its processes reads the workspace while they write) changed it, and
	// every entry was read as it was then.
	changing := err == nil && code == 1
	if err == nil && code != 0 && !changing {
		err = fmt.Errorf("tar exited %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	err = errors.Join(err, got.err)

	now := map[string]FileInfo{}
	for _, f := range got.files {
		now[f.Path] = f
	}
	var changes []audit.Record
	counts := map[audit.Event]int{}
	change := func(event audit.Event, f FileInfo) {
		counts[event]++
		changes = append(changes, audit.Record{Kind: audit.KindFile, Event: event, Path: f.Path, Size: f.Size, SHA256: f.SHA256, To: f.To})
	}
	for _, f := range got.files {
		switch g, ok := given[f.Path]; {
		case !ok:
			change(EventCreated, f)
		case g.SHA256 != f.SHA256 || g.To != f.To:
			change(EventModified, f)
		}
	}
	for p, g := range given {
		if _, ok := now[p]; !ok && got.more == 0 && err == nil {
			change(EventDeleted, g)
		}
	}
	slices.SortStableFunc(changes, func(a, b audit.Record) int { return strings.Compare(a.Path, b.Path) })
	written := 0
	for _, rec := range changes {
		if written == MaxWorkspaceChanges {
			break
		}
		op.ledgerWrite(ctx, l, rec)
		written++
	}
	reason := fmt.Sprintf("%d created, %d modified, %d deleted; %d files at the end", counts[EventCreated], counts[EventModified],
		counts[EventDeleted], len(got.files)+got.more)
	if n := len(changes) - written + got.more; n > 0 {
		reason += fmt.Sprintf("; %d more changes not listed (over %d)", n, MaxWorkspaceChanges)
	}
	if changing {
		reason += "; files changed while it was read"
	}
	if err != nil {
		reason += "; the workspace could not be read whole: " + err.Error()
	}
	op.ledgerWrite(ctx, l, audit.Record{Kind: audit.KindFile, Event: EventWorkspace, Path: t.Workdir, Reason: reason})
}

// ledgerWrite writes a record of l's ledger.
func (op *sandboxOps) ledgerWrite(ctx context.Context, l Lease, rec audit.Record) {
	rec.Node, rec.Tenant, rec.Lease, rec.Task, rec.Sandbox = op.node, l.Tenant, l.ID, l.Task, l.Sandbox.ID
	if err := op.audit.Write(ctx, rec); err != nil {
		op.log.Error("audit write failed", "err", err)
	}
}
