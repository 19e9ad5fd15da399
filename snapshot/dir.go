package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Dir is a Store of files in a directory on the node: the object under "a/b/c" is the file
// a/b/c below it (mode 0600, in directories of mode 0700). Every access goes through an
// os.Root, so a symbolic link planted in the directory cannot lead a read or a write outside
// it. Safe for concurrent use, and by several processes on one directory: a Put writes a
// temporary file beside its object and renames it into place.
type Dir struct {
	path string
	root *os.Root
}

var _ Store = (*Dir)(nil)

// tmpPrefix begins the names of a Put's temporary files. '~' is outside the key alphabet, so
// a temporary file is never taken for an object, nor an object for a temporary file.
const tmpPrefix = "~put-"

// copyBuffer is the size of the chunks a Dir's Put copies in.
const copyBuffer = 1 << 20

// NewDir opens the store in directory dir, creating it (mode 0700) if it is missing.
func NewDir(dir string) (*Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	return &Dir{path: abs, root: root}, nil
}

// String names the directory: "directory /var/lib/airlock/snapshots".
func (d *Dir) String() string { return "directory " + d.path }

// Put writes r's size bytes to a temporary file beside the object, syncs it, renames it over
// the object and syncs the directory: a reader sees the old object or the new one, whole, and
// a crash leaves at most a temporary file, which List does not show. Nothing is kept of a Put
// that fails, so there is nothing to resume: the next Put writes the file again.
func (d *Dir) Put(ctx context.Context, key string, r io.ReaderAt, size int64) (err error) {
	if err := checkKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%s: put %s: negative size %d", d, key, size)
	}
	parent, _ := path.Split(key)
	parent = strings.TrimSuffix(parent, "/")
	if parent != "" {
		if err := d.root.MkdirAll(parent, 0o700); err != nil {
			return d.down("put", key, err)
		}
	}
	tmp := path.Join(parent, tmpPrefix+randomName())
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return d.down("put", key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			d.root.Remove(tmp)
		}
	}()
	buf := make([]byte, min(size, copyBuffer))
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: put %s: %w", d, key, err)
		}
		n := int(min(int64(len(buf)), size-off))
		if err := readFull(r, buf[:n], off); err != nil {
			return fmt.Errorf("%s: put %s: reading its bytes: %w", d, key, err)
		}
		if _, err := f.Write(buf[:n]); err != nil {
			return d.down("put", key, err)
		}
		off += int64(n)
	}
	if err := f.Sync(); err != nil {
		return d.down("put", key, err)
	}
	if err := f.Close(); err != nil {
		return d.down("put", key, err)
	}
	if err := d.root.Rename(tmp, key); err != nil {
		return d.down("put", key, err)
	}
	// The rename is durable only once the directory holding it is synced.
	if err := d.syncDir(parent); err != nil {
		return d.down("put", key, err)
	}
	return nil
}

// Get opens the object's file; the caller closes it.
func (d *Dir) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	f, err := d.root.Open(key)
	if err != nil {
		return nil, d.fail("get", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, d.down("get", key, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: get %s: %w", d, key, ErrNotFound)
	}
	return f, nil
}

// Stat returns the object's size and the time its file was last written.
func (d *Dir) Stat(ctx context.Context, key string) (Object, error) {
	if err := checkKey(key); err != nil {
		return Object{}, err
	}
	st, err := d.root.Stat(key)
	if err != nil {
		return Object{}, d.fail("stat", key, err)
	}
	if !st.Mode().IsRegular() {
		return Object{}, fmt.Errorf("%s: stat %s: %w", d, key, ErrNotFound)
	}
	return Object{Key: key, Size: st.Size(), Modified: st.ModTime()}, nil
}

// Delete removes the object's file. The directories above it are left, empty or not: removing
// one could race with a Put making a file in it.
func (d *Dir) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	st, err := d.root.Lstat(key)
	if err != nil {
		if isMissing(err) {
			return nil
		}
		return d.down("delete", key, err)
	}
	if st.IsDir() {
		return nil // keys below it are objects; this one is not
	}
	if err := d.root.Remove(key); err != nil && !isMissing(err) {
		return d.down("delete", key, err)
	}
	return nil
}

// List walks the directory the prefix names (or, for a prefix ending inside a segment, the one
// above it) and returns the objects whose keys begin with prefix, sorted by key.
func (d *Dir) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	start := "."
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i]
	}
	var out []Object
	err := fs.WalkDir(d.root.FS(), start, func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			if isMissing(err) {
				return nil // removed while we walked, or never made
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name != start && !validSegment(e.Name()) {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil // a Put's temporary file, or nothing of ours
		}
		if !e.Type().IsRegular() || !strings.HasPrefix(name, prefix) {
			return nil
		}
		st, err := e.Info()
		if err != nil {
			if isMissing(err) {
				return nil
			}
			return err
		}
		out = append(out, Object{Key: name, Size: st.Size(), Modified: st.ModTime()})
		return nil
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%s: list %q: %w", d, prefix, ctxErr)
		}
		return nil, fmt.Errorf("%s: list %q: %w (%w)", d, prefix, ErrStoreDown, err)
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

func (d *Dir) syncDir(name string) error {
	if name == "" {
		name = "."
	}
	f, err := d.root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// fail maps a missing file to ErrNotFound and anything else to ErrStoreDown.
func (d *Dir) fail(op, key string, err error) error {
	if isMissing(err) {
		return fmt.Errorf("%s: %s %s: %w", d, op, key, ErrNotFound)
	}
	return d.down(op, key, err)
}

func (d *Dir) down(op, key string, err error) error {
	return fmt.Errorf("%s: %s %s: %w (%w)", d, op, key, ErrStoreDown, err)
}

// isMissing reports whether err says a file is not there: it does not exist, or a part of its
// path is a file where a directory would be ("a/b" when "a" is an object).
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// readFull reads len(p) bytes of r at off; a reader that holds fewer is an error
// (io.ErrUnexpectedEOF), so a Put never stores less than the size it was given.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil // ReadAt may say io.EOF alongside the last bytes
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("at offset %d: %w", off+int64(n), err)
}

func randomName() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// errBadKey is what a Store returns for a key or prefix this package would not have made.
var errBadKey = errors.New("not a snapshot store key (slash-separated segments of [a-z0-9._-], none empty, none \".\" or \"..\")")

// checkKey refuses a key that is not slash-separated segments of [a-z0-9._-], or that has an
// empty, "." or ".." segment: every Store checks a key before it touches anything, so no key
// can name a path outside a Dir or an object outside an S3 store's prefix.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%q: %w", key, errBadKey)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if !validSegment(seg) {
			return fmt.Errorf("%q: %w", key, errBadKey)
		}
	}
	return nil
}

// checkPrefix refuses a List prefix that no key could begin with: "" (every key), whole
// segments each followed by "/", then at most a partial last segment.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	segs := strings.Split(prefix, "/")
	last := segs[len(segs)-1]
	for _, seg := range segs[:len(segs)-1] {
		if !validSegment(seg) {
			return fmt.Errorf("prefix %q: %w", prefix, errBadKey)
		}
	}
	// A partial last segment may be "." or ".." (of ".x" or "..x", which are valid segments).
	if !validChars(last) {
		return fmt.Errorf("prefix %q: %w", prefix, errBadKey)
	}
	return nil
}

func validSegment(seg string) bool {
	return seg != "" && seg != "." && seg != ".." && validChars(seg)
}

func validChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
