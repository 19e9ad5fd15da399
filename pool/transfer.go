package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
)

// leaseFile returns tenant's lease id and p resolved inside its template's workspace (or the
// workspace itself, for an archive). A path outside it is refused, and the refusal recorded as
// the file event it would have been.
func (op *sandboxOps) leaseFile(ctx context.Context, tenant, id, p string, event audit.Event, archive bool) (Lease, string, error) {
	return op.workspacePath(ctx, tenant, id, p, event, archive)
}

// transferEvent names a transfer's audit event.
func transferEvent(dir audit.Event, archive bool) audit.Event {
	if archive {
		return dir + "-tar"
	}
	return dir
}

// FileInfo describes a transferred file.
type FileInfo = apitype.FileInfo

// PutFile writes r to p in tenant's lease id as the sandbox user, creating parent directories.
// With archive, r is a tar stream unpacked into the directory p.
func (op *sandboxOps) PutFile(ctx context.Context, tenant, id, p string, r io.Reader, archive bool) (FileInfo, error) {
	event := transferEvent("upload", archive)
	l, p, err := op.leaseFile(ctx, tenant, id, p, event, archive)
	if err != nil {
		return FileInfo{}, err
	}
	h := sha256.New()
	cr := &countReader{r: io.TeeReader(r, h)}
	var stdin io.Reader = cr
	var pw *io.PipeWriter
	members := make(chan []FileInfo, 1)
	if archive {
		// The archive's files are read as they pass, so the end of the lease tells them from
		// what its commands wrote.
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		stdin = io.TeeReader(cr, pw)
		go func() {
			files, _, _ := tarFiles(pr, p, MaxGivenFiles)
			members <- files
		}()
	}
	var stderr strings.Builder
	script := `airlock_full "$1"; umask 077 && mkdir -p "$(dirname "$1")" && cat > "$1"`
	if archive {
		// As the sandbox user: tar drops leading / and ../ from member names and will not
		// unpack through a link the archive itself makes, but it follows links already there,
		// so a target that holds one leading out of the workspace is refused.
		script = `airlock_full "$1"; umask 077 && mkdir -p "$1" && ` +
			`find "$1" -type l -exec sh -c 'for l; do r=$(realpath -m -- "$l"); case "$r" in "$0"|"$0"/*) ;; *) ` +
			`echo "$l leads to $r through a symbolic link, outside the workspace $0: an archive is not unpacked where it could follow it" >&2; exit 46;; esac; done' "$ws" {} + ` +
			`&& tar -x --no-same-owner --no-same-permissions -C "$1"`
	}
	code, err := op.runtime.Exec(ctx, l.Sandbox, ExecRequest{Cmd: confined(op.templates[l.Template].Workdir, script, p)}, stdin, io.Discard, &stderr)
	if err == nil && code != 0 {
		err = fmt.Errorf("%w: writing %s: %s", ErrBadRequest, p, strings.TrimSpace(stderr.String()))
	}
	info := FileInfo{Path: p, Size: cr.n, SHA256: hex.EncodeToString(h.Sum(nil))}
	op.fileEvent(ctx, l, event, info, err)
	if archive {
		pw.Close()
		if files := <-members; err == nil {
			op.given(l.ID, files...)
		}
	} else if err == nil {
		op.given(l.ID, info)
	}
	return info, err
}

// GetFile streams p from tenant's lease id to w; with archive, the directory p as a tar stream.
func (op *sandboxOps) GetFile(ctx context.Context, tenant, id, p string, w io.Writer, archive bool) (FileInfo, error) {
	event := transferEvent("download", archive)
	l, p, err := op.leaseFile(ctx, tenant, id, p, event, archive)
	if err != nil {
		return FileInfo{}, err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	var stderr strings.Builder
	script := `airlock_full "$1"; exec cat -- "$1"`
	if archive {
		script = `airlock_full "$1"; exec tar -c -C "$1" .`
	}
	cmd := confined(op.templates[l.Template].Workdir, script, p)
	code, err := op.runtime.Exec(ctx, l.Sandbox, ExecRequest{Cmd: cmd}, nil, cw, &stderr)
	if err == nil && code != 0 {
		err = fmt.Errorf("%w: reading %s: %s", ErrBadRequest, p, strings.TrimSpace(stderr.String()))
	}
	info := FileInfo{Path: p, Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}
	op.fileEvent(ctx, l, event, info, err)
	return info, err
}

// StatFile reports whether p is a regular file (a directory, with archive) in the lease's
// workspace, so a download can fail with a status before any byte is sent.
func (op *sandboxOps) StatFile(ctx context.Context, tenant, id, p string, archive bool) error {
	l, p, err := op.leaseFile(ctx, tenant, id, p, transferEvent("download", archive), archive)
	if err != nil {
		return err
	}
	test, what := "-f", "file"
	if archive {
		test, what = "-d", "directory"
	}
	_, err = op.fileScript(ctx, l, `airlock_full "$1"; test `+test+` "$1" || { echo "$1 is not a `+what+` in the workspace" >&2; exit 2; }`, p)
	if err != nil && !errors.Is(err, ErrNoSuchFile) {
		// Refused before the download began, so recorded here.
		op.fileEvent(ctx, l, transferEvent("download", archive), FileInfo{Path: p}, err)
	}
	return err
}

// fileEvent records a transfer, or its refusal: a request the pool would not carry out (a path
// outside the workspace, a file that is not there, an archive tar would not unpack) is denied
// under rule bad-request.
func (op *sandboxOps) fileEvent(ctx context.Context, l Lease, event audit.Event, info FileInfo, err error) {
	rec := audit.Record{
		Kind: audit.KindFile, Event: event, Node: op.node, Tenant: l.Tenant, Lease: l.ID, Task: l.Task,
		Sandbox: l.Sandbox.ID, Path: info.Path, To: info.To, Size: info.Size, SHA256: info.SHA256, Decision: audit.Allow,
	}
	if err != nil {
		rec.Decision, rec.Reason = audit.Deny, err.Error()
		if errors.Is(err, ErrBadRequest) || errors.Is(err, ErrNoSuchFile) || errors.Is(err, ErrFileExists) {
			rec.Rule = rule.BadRequest
		}
	}
	if aerr := op.audit.Write(ctx, rec); aerr != nil {
		op.log.Error("audit write failed", "err", aerr)
	}
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}
