package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
)

// ErrNoSuchFile and ErrFileExists are what file operations answer for a path that is not
// there, or (a move without overwrite) one that is.
var (
	ErrNoSuchFile = errors.New("no such file or folder")
	ErrFileExists = errors.New("file or folder already exists")
)

// Entry is a file or folder in a lease's workspace.
type Entry = apitype.Entry

// MaxListEntries bounds one listing; a longer one is cut there and says so.
const MaxListEntries = apitype.MaxListEntries

// Exit codes of the scripts below that mean a path is missing, or present when it must not be.
const (
	exitNoSuchFile = 44
	exitFileExists = 45
)

// entryFormat is find's -printf for an Entry: six NUL-terminated fields, so any name parses.
const entryFormat = `%y\0%s\0%m\0%T@\0%l\0%p\0`

// ListFiles lists the folder p of tenant's lease id (the workspace, when p is empty), down to
// depth levels (at least 1), sorted by path; truncated says MaxListEntries cut it short.
func (op *sandboxOps) ListFiles(ctx context.Context, tenant, id, p string, depth int) (entries []Entry, truncated bool, err error) {
	l, p, err := op.workspacePath(ctx, tenant, id, p, "list", true)
	if err != nil {
		return nil, false, err
	}
	depth = min(max(depth, 1), 64)
	script := `airlock_full "$1"; [ -d "$1" ] || { [ -e "$1" ] && echo "$1 is not a folder" >&2 && exit 2; exit ` + strconv.Itoa(exitNoSuchFile) + `; }; ` +
		`find "$1" -mindepth 1 -maxdepth "$2" -printf '` + entryFormat + `' | head -z -n "$3"`
	out, err := op.fileScript(ctx, l, script, p, strconv.Itoa(depth), strconv.Itoa(6*(MaxListEntries+1)))
	if err == nil {
		entries, err = parseEntries(out)
		if len(entries) > MaxListEntries {
			entries, truncated = entries[:MaxListEntries], true
		}
	}
	op.fileEvent(ctx, l, "list", FileInfo{Path: p, Size: int64(len(entries))}, err)
	return entries, truncated, err
}

// Stat describes p in tenant's lease id (a symlink itself, not what it points to).
func (op *sandboxOps) Stat(ctx context.Context, tenant, id, p string) (Entry, error) {
	l, p, err := op.workspacePath(ctx, tenant, id, p, "stat", true)
	if err != nil {
		return Entry{}, err
	}
	script := `airlock_entry "$1"; [ -e "$1" ] || [ -L "$1" ] || exit ` + strconv.Itoa(exitNoSuchFile) + `; find "$1" -maxdepth 0 -printf '` + entryFormat + `'`
	out, err := op.fileScript(ctx, l, script, p)
	var e Entry
	if err == nil {
		var es []Entry
		if es, err = parseEntries(out); err == nil && len(es) != 1 {
			err = fmt.Errorf("stat %s: %d entries", p, len(es))
		} else if err == nil {
			e = es[0]
		}
	}
	op.fileEvent(ctx, l, "stat", FileInfo{Path: p, Size: e.Size}, err)
	return e, err
}

// Mkdir makes the folder p, and its parents, in tenant's lease id; one already there is fine.
func (op *sandboxOps) Mkdir(ctx context.Context, tenant, id, p string) error {
	l, p, err := op.workspacePath(ctx, tenant, id, p, "mkdir", false)
	if err != nil {
		return err
	}
	_, err = op.fileScript(ctx, l, `airlock_full "$1"; umask 077 && mkdir -p -- "$1"`, p)
	op.fileEvent(ctx, l, "mkdir", FileInfo{Path: p}, err)
	return err
}

// Remove removes p from tenant's lease id: a file, a symlink (not what it points to), an empty
// folder, or with recursive a folder and all it holds. The workspace itself is not removed.
func (op *sandboxOps) Remove(ctx context.Context, tenant, id, p string, recursive bool) error {
	l, p, err := op.workspacePath(ctx, tenant, id, p, "remove", false)
	if err != nil {
		return err
	}
	script := `airlock_entry "$1"; [ -e "$1" ] || [ -L "$1" ] || exit ` + strconv.Itoa(exitNoSuchFile) + `; ` +
		`if [ "$2" = recursive ]; then rm -rf -- "$1"; elif [ -d "$1" ] && [ ! -L "$1" ]; then rmdir -- "$1"; else rm -f -- "$1"; fi`
	mode := "one"
	if recursive {
		mode = "recursive"
	}
	_, err = op.fileScript(ctx, l, script, p, mode)
	op.fileEvent(ctx, l, "remove", FileInfo{Path: p}, err)
	return err
}

// Move renames from to to within tenant's lease id, making to's parent folders; with overwrite,
// what to names is replaced (a file, or an empty folder), otherwise its existence is refused.
func (op *sandboxOps) Move(ctx context.Context, tenant, id, from, to string, overwrite bool) error {
	l, from, err := op.workspacePath(ctx, tenant, id, from, "move", false)
	if err != nil {
		return err
	}
	ws := op.templates[l.Template].Workdir
	dest, err := inWorkspace(ws, to, false)
	if err != nil {
		op.fileEvent(ctx, l, "move", FileInfo{Path: from, To: dest}, err)
		return err
	}
	script := `airlock_entry "$1"; airlock_entry "$2"; [ -e "$1" ] || [ -L "$1" ] || exit ` + strconv.Itoa(exitNoSuchFile) + `; ` +
		`if [ "$3" != overwrite ] && { [ -e "$2" ] || [ -L "$2" ]; }; then exit ` + strconv.Itoa(exitFileExists) + `; fi; ` +
		`umask 077 && mkdir -p -- "$(dirname -- "$2")" && mv -T -- "$1" "$2"`
	mode := "keep"
	if overwrite {
		mode = "overwrite"
	}
	_, err = op.fileScript(ctx, l, script, from, dest, mode)
	op.fileEvent(ctx, l, "move", FileInfo{Path: from, To: dest}, err)
	return err
}

// confined is the command that runs script in the sandbox with args ($1...) after the two checks
// every workspace operation makes there, where symbolic links are what they are: airlock_full
// PATH (for what reads, writes or lists through PATH: every link followed) and airlock_entry
// PATH (for what acts on the entry itself, a link included: the links of its folder followed)
// each exit 46, saying where the path leads, unless it stays in the workspace ws (passed as $0,
// never spliced into the script). The lexical check before (inWorkspace) is not enough alone:
// /workspace/out is in the workspace, but not when it links to /etc.
func confined(ws, script string, args ...string) []string {
	prelude := `ws=$0
airlock_full() { r=$(realpath -m -- "$1") && case "$r" in "$ws"|"$ws"/*) return 0;; esac; ` +
		`echo "$1 leads to ${r:-a path that does not resolve} through a symbolic link, outside the workspace $ws" >&2; exit 46; }
airlock_entry() { airlock_full "$(dirname -- "$1")"; }
`
	return append([]string{"sh", "-c", prelude + script, ws}, args...)
}

// workspacePath is leaseFile for the operations above: the lease and p inside its workspace,
// which p may name itself only when root is set; a refusal is recorded as event.
func (op *sandboxOps) workspacePath(ctx context.Context, tenant, id, p string, event audit.Event, root bool) (Lease, string, error) {
	l, err := op.table.Held(ctx, tenant, id)
	if err != nil {
		return Lease{}, "", err
	}
	ws := op.templates[l.Template].Workdir
	if p == "" && root {
		p = ws
	}
	p, err = inWorkspace(ws, p, root)
	if err != nil {
		op.fileEvent(ctx, l, event, FileInfo{Path: p}, err)
		return Lease{}, "", err
	}
	return l, p, nil
}

// inWorkspace resolves p (relative to ws, or absolute) and refuses what is outside ws, or ws
// itself unless root is set.
func inWorkspace(ws, p string, root bool) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: a path is required", ErrBadRequest)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: the path holds a NUL byte", ErrBadRequest)
	}
	if !path.IsAbs(p) {
		p = path.Join(ws, p)
	}
	p = path.Clean(p)
	switch {
	case p == ws && !root:
		return p, fmt.Errorf("%w: %s is the workspace itself: name a file or folder in it", ErrBadRequest, p)
	case p != ws && !strings.HasPrefix(p, ws+"/"):
		return p, fmt.Errorf("%w: %s is outside the workspace %s", ErrBadRequest, p, ws)
	}
	return p, nil
}

// fileScript runs script in l's sandbox as its user with args ($1...), returning what it
// printed; the exit codes above become ErrNoSuchFile and ErrFileExists, any other failure
// ErrBadRequest with what the script said.
func (op *sandboxOps) fileScript(ctx context.Context, l Lease, script string, args ...string) ([]byte, error) {
	var out, stderr bytes.Buffer
	cmd := confined(op.templates[l.Template].Workdir, script, args...)
	code, err := op.runtime.Exec(ctx, l.Sandbox, ExecRequest{Cmd: cmd, Timeout: time.Minute}, nil, &limitWriter{w: &out, n: 64 << 20}, &limitWriter{w: &stderr, n: 4096})
	switch {
	case err != nil:
		return nil, err
	case code == exitNoSuchFile:
		return nil, fmt.Errorf("%w: %s", ErrNoSuchFile, args[0])
	case code == exitFileExists && len(args) > 1:
		return nil, fmt.Errorf("%w: %s", ErrFileExists, args[1])
	case code != 0:
		return nil, fmt.Errorf("%w: %s", ErrBadRequest, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// parseEntries reads find's entryFormat output.
func parseEntries(b []byte) ([]Entry, error) {
	fields := bytes.Split(b, []byte{0})
	if len(fields) > 0 && len(fields[len(fields)-1]) == 0 {
		fields = fields[:len(fields)-1]
	}
	if len(fields)%6 != 0 {
		return nil, fmt.Errorf("listing: %d fields, not entries of 6", len(fields))
	}
	out := make([]Entry, 0, len(fields)/6)
	for i := 0; i < len(fields); i += 6 {
		f := fields[i : i+6]
		size, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("listing: size %q", f[1])
		}
		mode, err := strconv.ParseUint(string(f[2]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("listing: mode %q", f[2])
		}
		secs, err := strconv.ParseFloat(string(f[3]), 64)
		if err != nil {
			return nil, fmt.Errorf("listing: mtime %q", f[3])
		}
		typ := map[string]string{"f": "file", "d": "dir", "l": "symlink"}[string(f[0])]
		if typ == "" {
			typ = "other"
		}
		p := string(f[5])
		out = append(out, Entry{Path: p, Name: path.Base(p), Type: typ, Size: size, Mode: fmt.Sprintf("%04o", mode),
			MTime: time.Unix(0, int64(secs*1e9)).UTC(), Link: string(f[4])})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// limitWriter keeps the first n bytes written to it and drops the rest.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	k := len(p)
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	l.n -= int64(len(p))
	if len(p) > 0 {
		if _, err := l.w.Write(p); err != nil {
			return 0, err
		}
	}
	return k, nil
}
