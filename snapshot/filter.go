package snapshot

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Linux's limits on what tar -x can make. A name or link target over them could not be unpacked
// anyway; refusing it here also bounds what one entry costs Filter to track.
const (
	// maxTarPath is PATH_MAX less its NUL: the longest name, and the longest symlink target.
	maxTarPath = 4095
	// maxTarSegment is NAME_MAX: the longest one component of a name.
	maxTarSegment = 255
)

// Summary.Owners lists at most maxOwners owners, each name clipped to maxOwnerName bytes (the
// width of the ustar field): an archive whose every entry names a new megabyte-long owner in a
// PAX record must not grow the summary with it.
const (
	maxOwners    = 16
	maxOwnerName = 32
)

// Rules say what an archive may hold and who owns what is written. A zero Rules is invalid
// (Validate): there is no default root, owner or limit that would be safe for every template.
type Rules struct {
	// Roots are the paths entries may be at or under, relative to the directory the archive is
	// unpacked in: clean, slash-separated, without a leading slash or a ".." ("workspace",
	// "tmp/cache"). An entry naming a root itself may only be a directory; an entry naming a
	// parent of a root ("tmp") is outside every root.
	Roots []string
	// UID and GID own every entry written. The owners the archive names are not trusted with
	// anything: they are only reported, in Summary.Owners.
	UID, GID int
	// MaxBytes caps the total content of the regular files, counted from the sizes the headers
	// declare before any content is read, so an archive over it is refused without being read
	// through. Must be > 0.
	MaxBytes int64
	// MaxEntries caps the headers read, together with the directories entries imply without
	// listing them ("a/b/c" alone implies "a" and "a/b"), since Filter keeps a few dozen bytes
	// for each for as long as it runs. Must be > 0.
	MaxEntries int
}

// Validate says what is wrong with r, naming the field, or nil.
func (r Rules) Validate() error {
	if len(r.Roots) == 0 {
		return errors.New("snapshot.Rules.Roots: at least one root is needed")
	}
	for i, root := range r.Roots {
		name, err := parseTarName(root)
		switch {
		case err != "":
			return fmt.Errorf("snapshot.Rules.Roots[%d] %q: %s", i, root, err)
		case name.dir || strings.Join(name.segments, "/") != root:
			return fmt.Errorf("snapshot.Rules.Roots[%d] %q: must be clean (no \"//\", \"./\" or trailing slash)", i, root)
		}
	}
	switch {
	case r.UID < 0:
		return fmt.Errorf("snapshot.Rules.UID: must be >= 0, got %d", r.UID)
	case r.GID < 0:
		return fmt.Errorf("snapshot.Rules.GID: must be >= 0, got %d", r.GID)
	case r.MaxBytes <= 0:
		return fmt.Errorf("snapshot.Rules.MaxBytes: must be > 0, got %d", r.MaxBytes)
	case r.MaxEntries <= 0:
		return fmt.Errorf("snapshot.Rules.MaxEntries: must be > 0, got %d", r.MaxEntries)
	}
	return nil
}

// Summary is what Filter wrote, and whom the archive said owned it.
type Summary struct {
	// Entries counts the entries written: Files + Dirs + Symlinks + Links.
	Entries, Files, Dirs, Symlinks, Links int
	// Bytes is the content of the files written.
	Bytes int64
	// Owners are the distinct owners the archive named, in the order first seen, at most 16,
	// each name clipped to 32 bytes. They are what the archive claims, for the record: every
	// entry is written owned by Rules.UID and Rules.GID.
	Owners []Owner
	// MoreOwners says the archive named more owners than Owners lists.
	MoreOwners bool
}

// Owner is an owner an archive named for an entry.
type Owner struct {
	UID, GID    int
	User, Group string
}

// Check names what an entry failed: a closed vocabulary, fit for a metric label.
type Check uint8

// The checks.
const (
	// FormatCheck: the stream is not a tar archive Filter reads (not tar, cut short, a header
	// that contradicts itself, a global header that would change the entries after it).
	FormatCheck Check = iota + 1
	// NameCheck: an empty, absolute or over-long name, a ".." in it, a NUL byte, a name ending
	// in "." or one ending in a slash for something that is not a directory.
	NameCheck
	// RootCheck: a name outside every root, or a root that is not a directory.
	RootCheck
	// PathCheck: a name that goes through a symlink, file or hard link an earlier entry made.
	PathCheck
	// ReplaceCheck: an entry of one type where an earlier entry made another (a directory
	// where a symlink was, a symlink where a directory was, or was implied).
	ReplaceCheck
	// LinkCheck: a hard link whose target is not a regular file earlier in the archive, or a
	// symlink whose target is empty or over-long.
	LinkCheck
	// TypeCheck: a device, FIFO, sparse file or any type other than a regular file, directory,
	// symlink or hard link.
	TypeCheck
	// SizeCheck: file content past Rules.MaxBytes.
	SizeCheck
	// EntriesCheck: more entries than Rules.MaxEntries.
	EntriesCheck
)

func (c Check) String() string {
	switch c {
	case FormatCheck:
		return "format"
	case NameCheck:
		return "name"
	case RootCheck:
		return "root"
	case PathCheck:
		return "path"
	case ReplaceCheck:
		return "replace"
	case LinkCheck:
		return "link"
	case TypeCheck:
		return "type"
	case SizeCheck:
		return "size"
	case EntriesCheck:
		return "entries"
	}
	return fmt.Sprintf("check(%d)", uint8(c))
}

// Refused is Filter's error when the archive does not pass: the fault is the archive's, so a
// caller answers 400 with the message. Any other error from Filter is the reader's, the
// writer's or the rules' and is not the archive's fault.
type Refused struct {
	// Index is the position of the entry among the headers read, from 0.
	Index int
	// Entry is the entry's name as the archive spells it, its first 4095 bytes: untrusted
	// bytes, to be quoted (%q) wherever they are shown. Empty when the header could not be
	// read.
	Entry string
	Check Check
	// Why says what is wrong, in words.
	Why string
	// Err is archive/tar's error, when it could not read the archive (FormatCheck).
	Err error
}

// Error names the entry by at most its first 256 characters: the message goes to logs and the
// audit trail, and a name may be 4 KB.
func (e *Refused) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("snapshot archive refused at entry %d: %s", e.Index, e.Why)
	}
	return fmt.Sprintf("snapshot archive refused at entry %d %.256q: %s", e.Index, e.Entry, e.Why)
}

func (e *Refused) Unwrap() error { return e.Err }

// Filter reads the tar archive r, checks each entry against rules and what the entries before
// it made, and writes to w a normalized archive of the entries: the same names (cleaned), types,
// permission bits, times, content and link targets, owned by rules.UID and rules.GID, and
// nothing else. It stops at the first entry that does not pass, with a *Refused naming it.
//
// Filter is what makes an archive safe to give tar -x, on its way into the store (the sandbox
// made it) and on its way out (the store held it): both are untrusted. Only its output may be
// unpacked, never its input, since a tar reader other than archive/tar may read the same bytes
// as other entries.
//
// What is refused: an absolute name, a ".." anywhere in a name (a name that cleans to something
// safe is refused too, not rewritten), a name outside every root; a name through a symlink an
// earlier entry made ("a/./link/x" and "a//link/x" included), or through a file; an entry whose
// type differs from what an earlier entry made of its name; a hard link to anything but a regular
// file earlier in the archive; devices, FIFOs, sparse files and every type but regular file,
// directory, symlink and hard link; a symlink target longer than Linux allows; more content than
// rules.MaxBytes, counted from the declared sizes before reading any, and more entries than
// rules.MaxEntries. Symlink targets are otherwise data, kept as they are: the sandbox follows them
// at run time with its own confinement, and Filter only makes sure nothing in the archive is
// written through one.
//
// What is normalized: owners (the archive's go to Summary.Owners only, names are dropped),
// modes (permission bits only: setuid, setgid and sticky are dropped), times (ModTime kept to
// the nanosecond, access and change times dropped), every PAX record and extended attribute
// (security.capability, ACLs) dropped, names cleaned of "./" and "//", directories named with a
// trailing slash. The output is in PAX format (plain ustar headers wherever they suffice).
//
// Filter reads r to its end, not only to the archive's end marker (where tar readers stop):
// past the marker only zeros may follow (a record's padding), at most 64 KiB of them. So a
// reader that checks its input at its end, as Catalog.Open's verifies the archive against the
// snapshot's ID, always gets to check it; its failure there is Filter's error.
//
// Every entry Filter writes has passed every check given the entries written before it, so what
// it wrote before an error is as safe to unpack as a whole output; but it is not the whole
// archive, and on an error the caller must treat the restore or save as failed. Filter does not
// know what is already in the directory the output is unpacked in: a symlink the sandbox image
// left under a root is the caller's to guard against.
//
// Errors: *Refused when the archive does not pass; rules.Validate's error; and r's or w's own
// errors, wrapped, which are not the archive's fault. Summary counts what was written, also on
// error. Filter holds no state between calls and is safe for concurrent use.
func Filter(r io.Reader, w io.Writer, rules Rules) (Summary, error) {
	if err := rules.Validate(); err != nil {
		return Summary{}, err
	}
	src := &tarSource{r: r}
	dst := &tarSink{w: w}
	f := &tarFilter{rules: rules, tree: newTarTree(rules.Roots), tw: tar.NewWriter(dst), src: src, dst: dst}
	tr := tar.NewReader(src)
	for i := 0; ; i++ {
		f.index, f.name = i, ""
		hdr, err := tr.Next()
		if errors.Is(err, tar.ErrInsecurePath) {
			// Set by GODEBUG=tarinsecurepath=0, with the header: the checks below are stricter.
			err = nil
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return f.sum, f.failed(err, "not a tar archive it can read")
		}
		f.name = hdr.Name
		if err := f.entry(hdr, tr); err != nil {
			return f.sum, err
		}
	}
	if err := f.trailer(); err != nil {
		return f.sum, err
	}
	if err := f.tw.Close(); err != nil {
		return f.sum, f.failed(err, "cannot be written back")
	}
	return f.sum, nil
}

// tarFilter is one run of Filter.
type tarFilter struct {
	rules Rules
	tree  *tarTree
	tw    *tar.Writer
	src   *tarSource
	dst   *tarSink
	sum   Summary
	// seen counts the headers read and the directories implied, against Rules.MaxEntries.
	seen int
	// index and name are the entry being checked, for refusals.
	index int
	name  string
}

// refuse returns a refusal of the entry being checked.
func (f *tarFilter) refuse(c Check, format string, args ...any) *Refused {
	return &Refused{Index: f.index, Entry: clip(f.name, maxTarPath), Check: c, Why: fmt.Sprintf(format, args...)}
}

// failed says whose fault err from archive/tar is: the writer's (its error, wrapped), the
// reader's (the same), or else the archive's, as a refusal that says what.
func (f *tarFilter) failed(err error, what string) error {
	switch {
	case f.dst.err != nil:
		return fmt.Errorf("snapshot: writing the filtered archive: %w", f.dst.err)
	case f.src.err != nil:
		return fmt.Errorf("snapshot: reading the archive: %w", f.src.err)
	}
	ref := f.refuse(FormatCheck, "%s: %v", what, err)
	ref.Err = err
	return ref
}

// entry checks hdr, records what it makes, and writes it with its content from tr.
func (f *tarFilter) entry(hdr *tar.Header, tr io.Reader) error {
	if f.seen++; f.seen > f.rules.MaxEntries {
		return f.refuse(EntriesCheck, "more than %d entries", f.rules.MaxEntries)
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return f.global(hdr)
	}
	k, err := f.kind(hdr)
	if err != nil {
		return err
	}
	name, why := parseTarName(hdr.Name)
	switch {
	case why != "":
		return f.refuse(NameCheck, "%s", why)
	case name.dir && k != tarDir:
		// GNU tar unpacks a regular file named "a/" as a directory: the name and the type
		// must say the same.
		return f.refuse(NameCheck, "a name ending in a slash for %s", k)
	case k != tarFile && hdr.Size != 0:
		// archive/tar reads no content for these and GNU tar may: refused, so both read the
		// same entries.
		return f.refuse(FormatCheck, "%s that declares %d bytes of content", k, hdr.Size)
	case hdr.Size < 0:
		// archive/tar refuses these already; the count of bytes below relies on it.
		return f.refuse(FormatCheck, "a negative size")
	}
	name.dir = k == tarDir
	out := &tar.Header{
		Typeflag: hdr.Typeflag,
		Name:     name.String(),
		Mode:     hdr.Mode & 0o777,
		Uid:      f.rules.UID,
		Gid:      f.rules.GID,
		ModTime:  hdr.ModTime,
		// PAX keeps ModTime's nanoseconds and any name as its bytes; archive/tar writes a
		// plain ustar header when nothing needs more.
		Format: tar.FormatPAX,
	}
	switch k {
	case tarFile:
		if hdr.Size > f.rules.MaxBytes-f.sum.Bytes {
			return f.refuse(SizeCheck, "declares %d bytes, and with the %d before it the archive's content would be over its limit of %d bytes",
				hdr.Size, f.sum.Bytes, f.rules.MaxBytes)
		}
		out.Size = hdr.Size
	case tarSymlink:
		switch {
		case hdr.Linkname == "":
			return f.refuse(LinkCheck, "a symlink with an empty target")
		case len(hdr.Linkname) > maxTarPath:
			return f.refuse(LinkCheck, "a symlink target of %d bytes, longer than Linux allows (%d)", len(hdr.Linkname), maxTarPath)
		case strings.IndexByte(hdr.Linkname, 0) >= 0:
			return f.refuse(LinkCheck, "a NUL byte in the symlink target")
		}
		out.Linkname = hdr.Linkname
	case tarLink:
		target, err := f.linkTarget(hdr.Linkname)
		if err != nil {
			return err
		}
		out.Linkname = target.String()
	}
	if err := f.place(name.segments, k); err != nil {
		return err
	}
	f.owner(hdr)
	if err := f.tw.WriteHeader(out); err != nil {
		return f.failed(err, "cannot be written back")
	}
	if k == tarFile {
		if _, err := io.Copy(f.tw, tr); err != nil {
			return f.failed(err, "its content cannot be read")
		}
	}
	f.count(k, out.Size)
	return nil
}

// maxTrailer bounds what Filter reads past an archive's end marker: GNU tar pads its archive
// with zeros to the end of a record, 10 KiB by default and 64 KiB at its largest blocking factor.
const maxTrailer = 64 << 10

// trailer reads what follows the archive's end marker, where archive/tar stops, to the end of
// the input: zeros only, at most maxTrailer of them. A reader that checks its input when it
// reaches the end (a snapshot's: Catalog.Open verifies the archive against its ID there, and
// the blob's last chunk) checks it only if it is read to the end.
func (f *tarFilter) trailer() error {
	buf := make([]byte, 4096)
	read := 0
	for {
		n, err := f.src.Read(buf)
		if slices.ContainsFunc(buf[:n], func(b byte) bool { return b != 0 }) {
			return f.refuse(FormatCheck, "bytes other than zeros past the end of the archive")
		}
		if read += n; read > maxTrailer {
			return f.refuse(FormatCheck, "more than %d bytes of zeros past the end of the archive", maxTrailer)
		}
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return fmt.Errorf("snapshot: reading the archive: %w", err)
		}
	}
}

// kind says what hdr makes, or refuses what Filter does not write.
func (f *tarFilter) kind(hdr *tar.Header) (tarKind, error) {
	switch hdr.Typeflag {
	case tar.TypeReg:
		for key := range hdr.PAXRecords {
			if strings.HasPrefix(key, "GNU.sparse.") {
				return 0, f.refuse(TypeCheck, "a sparse file (PAX record %.256q)", key)
			}
		}
		return tarFile, nil
	case tar.TypeDir:
		return tarDir, nil
	case tar.TypeSymlink:
		return tarSymlink, nil
	case tar.TypeLink:
		return tarLink, nil
	case tar.TypeChar:
		return 0, f.refuse(TypeCheck, "a character device")
	case tar.TypeBlock:
		return 0, f.refuse(TypeCheck, "a block device")
	case tar.TypeFifo:
		return 0, f.refuse(TypeCheck, "a FIFO")
	case tar.TypeGNUSparse:
		return 0, f.refuse(TypeCheck, "a sparse file")
	}
	return 0, f.refuse(TypeCheck, "an entry of type %q, which is not a regular file, directory, symlink or hard link", hdr.Typeflag)
}

// global drops a global PAX header that only comments (git archive writes one); any other is
// refused, since GNU tar applies its records to every entry after it and archive/tar does not.
func (f *tarFilter) global(hdr *tar.Header) error {
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(hdr.PAXRecords)) {
		if k != "comment" {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		return f.refuse(FormatCheck, "a global PAX header with records %.256q, which would change the entries after it", strings.Join(keys, " "))
	}
	return nil
}

// linkTarget checks a hard link's target: a regular file an earlier entry made.
func (f *tarFilter) linkTarget(target string) (tarName, error) {
	name, why := parseTarName(target)
	switch {
	case why != "":
		return tarName{}, f.refuse(LinkCheck, "a hard link to %.256q: %s", target, why)
	case name.dir:
		return tarName{}, f.refuse(LinkCheck, "a hard link to %.256q, a name ending in a slash", target)
	case !f.tree.underRoot(name.segments):
		return tarName{}, f.refuse(LinkCheck, "a hard link to %.256q, outside every root", target)
	}
	if k, ok := f.tree.lookup(name.segments); !ok || k != tarFile {
		return tarName{}, f.refuse(LinkCheck, "a hard link to %.256q, which is not a regular file earlier in the archive", target)
	}
	return name, nil
}

// place records that the entry makes k at segments, after checking that it is under a root, that
// no name above it is anything but a directory, and that it does not replace another type.
// Directories implied on the way are recorded too, and count as entries.
func (f *tarFilter) place(segments []string, k tarKind) error {
	t := f.tree
	at := 0 // the top: the directory the archive is unpacked in
	under := false
	for i, seg := range segments[:len(segments)-1] {
		child, ok := t.child(at, seg)
		switch {
		case !ok && !under:
			return f.refuse(RootCheck, "outside every root")
		case !ok:
			if f.seen++; f.seen > f.rules.MaxEntries {
				return f.refuse(EntriesCheck, "more than %d entries, counting the directories they imply", f.rules.MaxEntries)
			}
			child = t.add(at, seg, tarImplied)
		case t.nodes[child].kind == tarSymlink:
			return f.refuse(PathCheck, "goes through %.256q, a symlink an earlier entry made", strings.Join(segments[:i+1], "/"))
		case !t.nodes[child].kind.isDir():
			return f.refuse(PathCheck, "goes through %.256q, %s an earlier entry made", strings.Join(segments[:i+1], "/"), t.nodes[child].kind)
		}
		at = child
		under = under || t.nodes[at].root
	}
	last := segments[len(segments)-1]
	child, ok := t.child(at, last)
	switch {
	case !ok && !under, ok && !under && !t.nodes[child].root:
		return f.refuse(RootCheck, "outside every root")
	case !ok:
		t.add(at, last, k)
		return nil
	case t.nodes[child].root && k != tarDir:
		return f.refuse(RootCheck, "a root may only be a directory, not %s", k)
	}
	was := t.nodes[child].kind
	if was != k && !(was == tarImplied && k == tarDir) {
		return f.refuse(ReplaceCheck, "%s where %s was", k, was)
	}
	t.nodes[child].kind = k
	return nil
}

// owner records hdr's owner in the summary.
func (f *tarFilter) owner(hdr *tar.Header) {
	o := Owner{UID: hdr.Uid, GID: hdr.Gid, User: clip(hdr.Uname, maxOwnerName), Group: clip(hdr.Gname, maxOwnerName)}
	switch {
	case slices.Contains(f.sum.Owners, o):
	case len(f.sum.Owners) == maxOwners:
		f.sum.MoreOwners = true
	default:
		f.sum.Owners = append(f.sum.Owners, o)
	}
}

// count adds an entry of k written, with size bytes of content, to the summary.
func (f *tarFilter) count(k tarKind, size int64) {
	f.sum.Entries++
	switch k {
	case tarFile:
		f.sum.Files++
		f.sum.Bytes += size
	case tarDir:
		f.sum.Dirs++
	case tarSymlink:
		f.sum.Symlinks++
	case tarLink:
		f.sum.Links++
	}
}

// clip returns s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// tarName is an entry's name, parsed.
type tarName struct {
	// segments are the name's components, without "" and ".".
	segments []string
	// dir says the name ended in a slash.
	dir bool
}

// String returns the name as Filter writes it: cleaned, a directory's with a trailing slash.
func (n tarName) String() string {
	s := strings.Join(n.segments, "/")
	if n.dir {
		s += "/"
	}
	return s
}

// parseTarName splits an entry's name into its components, or says why it is refused. "." and
// empty components are dropped ("a/./b" and "a//b" are "a/b" to Linux whatever a is); ".." is
// refused rather than resolved, since what "a/.." names depends on whether a is a symlink.
func parseTarName(s string) (tarName, string) {
	switch {
	case s == "":
		return tarName{}, "an empty name"
	case len(s) > maxTarPath:
		return tarName{}, fmt.Sprintf("a name of %d bytes, longer than Linux allows (%d)", len(s), maxTarPath)
	case strings.IndexByte(s, 0) >= 0:
		return tarName{}, "a NUL byte in the name"
	case s[0] == '/':
		return tarName{}, "an absolute name"
	}
	trimmed := strings.TrimRight(s, "/")
	if trimmed == "." || strings.HasSuffix(trimmed, "/.") {
		// "a/." is a itself to Linux but not to every tar: the name must end in its own.
		return tarName{}, `a name ending in "."`
	}
	var n tarName
	n.dir = len(trimmed) < len(s)
	for seg := range strings.SplitSeq(trimmed, "/") {
		switch {
		case seg == "..":
			return tarName{}, `a ".." in the name`
		case seg == "" || seg == ".":
			continue
		case len(seg) > maxTarSegment:
			return tarName{}, fmt.Sprintf("a name component of %d bytes, longer than Linux allows (%d)", len(seg), maxTarSegment)
		}
		n.segments = append(n.segments, seg)
	}
	if len(n.segments) == 0 {
		// Not reached (such a name ends in "." or begins with "/"), but place relies on it.
		return tarName{}, "a name of only dots and slashes"
	}
	return n, ""
}

// tarKind is what an entry makes of its name.
type tarKind uint8

const (
	// tarImplied is a directory entries are under that no entry of the archive listed (the
	// parents of the roots, or "a" when "a/b" comes with no "a/" before it).
	tarImplied tarKind = iota
	tarDir
	tarFile
	tarSymlink
	tarLink
)

func (k tarKind) isDir() bool { return k == tarImplied || k == tarDir }

func (k tarKind) String() string {
	switch k {
	case tarImplied:
		return "a directory entries are under"
	case tarDir:
		return "a directory"
	case tarFile:
		return "a regular file"
	case tarSymlink:
		return "a symlink"
	case tarLink:
		return "a hard link"
	}
	return "an unknown kind"
}

// tarTree records what the archive made of each name so far, as a table from (parent,
// component) to node: each entry costs one lookup per component and, for each new name, one
// row of the component's bytes and a few words, however deep it is.
type tarTree struct {
	ids   map[tarEdge]int
	nodes []tarNode
}

type tarEdge struct {
	parent int
	name   string
}

type tarNode struct {
	kind tarKind
	// root marks a root: names at it or under it are allowed.
	root bool
}

// newTarTree returns a tree holding the roots and their parents as implied directories.
func newTarTree(roots []string) *tarTree {
	t := &tarTree{ids: make(map[tarEdge]int), nodes: []tarNode{{kind: tarImplied}}}
	for _, root := range roots {
		at := 0
		for seg := range strings.SplitSeq(root, "/") {
			child, ok := t.child(at, seg)
			if !ok {
				child = t.add(at, seg, tarImplied)
			}
			at = child
		}
		t.nodes[at].root = true
	}
	return t
}

func (t *tarTree) child(parent int, name string) (int, bool) {
	id, ok := t.ids[tarEdge{parent, name}]
	return id, ok
}

// add records a new name; the component is copied, so the entry's whole name is not kept.
func (t *tarTree) add(parent int, name string, k tarKind) int {
	id := len(t.nodes)
	t.nodes = append(t.nodes, tarNode{kind: k})
	t.ids[tarEdge{parent, strings.Clone(name)}] = id
	return id
}

// lookup returns what the archive made of segments, if anything.
func (t *tarTree) lookup(segments []string) (tarKind, bool) {
	at := 0
	for _, seg := range segments {
		child, ok := t.child(at, seg)
		if !ok {
			return 0, false
		}
		at = child
	}
	return t.nodes[at].kind, true
}

// underRoot says whether segments is at or under a root.
func (t *tarTree) underRoot(segments []string) bool {
	at := 0
	for _, seg := range segments {
		child, ok := t.child(at, seg)
		if !ok {
			return false
		}
		if at = child; t.nodes[at].root {
			return true
		}
	}
	return false
}

// tarSource is the archive's reader. It keeps the first error the reader returned other than
// io.EOF, so a failure to read (the store went away) is told apart from an archive that is not
// one, which archive/tar reports the same way (io.ErrUnexpectedEOF).
type tarSource struct {
	r   io.Reader
	err error
}

func (s *tarSource) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// tarSink is the output's writer; it keeps the first error it returned, as tarSource does.
type tarSink struct {
	w   io.Writer
	err error
}

func (s *tarSink) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}
