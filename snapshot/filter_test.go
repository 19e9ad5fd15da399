package snapshot

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The archives of these tests are written in Go, entry by entry (or byte by byte where
// archive/tar will not write them), so each attack is exactly the bytes it claims to be; the GNU
// tar tests at the end check that what passes unpacks as it should.

// filterRules are a template's with one extra path: the workspace and a cache under /tmp.
func filterRules() Rules {
	return Rules{Roots: []string{"workspace", "tmp/cache"}, UID: 1000, GID: 1001, MaxBytes: 64 << 10, MaxEntries: 100}
}

// filterTime is an mtime with nanoseconds, which only PAX keeps.
var testTime = time.Unix(1_700_000_000, 123_456_789)

// tarEntry is one entry of a crafted archive: a header, and a file's content.
type tarEntry struct {
	hdr  tar.Header
	body string
}

func regEntry(name, body string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Uid: 1000, Gid: 1001, ModTime: testTime, Format: tar.FormatPAX}, body: body}
}

func dirEntry(name string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, Uid: 1000, Gid: 1001, ModTime: testTime, Format: tar.FormatPAX}}
}

func symlinkEntry(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, Uid: 1000, Gid: 1001, ModTime: testTime, Format: tar.FormatPAX}}
}

func linkEntry(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644, Uid: 1000, Gid: 1001, ModTime: testTime, Format: tar.FormatPAX}}
}

func specialEntry(name string, typ byte) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: typ, Name: name, Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: testTime, Format: tar.FormatPAX}}
}

// tarArchive writes entries as archive/tar does; a regular file's size is its body's.
func tarArchive(tb testing.TB, entries ...tarEntry) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := e.hdr
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			tb.Fatalf("writing the header of %q: %v", hdr.Name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			tb.Fatalf("writing %q: %v", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// rawTarEntry is a header archive/tar will not write (a GNU sparse type, a size on a directory, a
// file named with a trailing slash), made by hand, with its body; gnu selects GNU's magic over
// ustar's.
func rawTarEntry(typeflag byte, name string, size int64, body []byte, gnu bool) []byte {
	var b [512]byte
	copy(b[0:100], name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0001750\x00")
	copy(b[116:], "0001751\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], fmt.Sprintf("%011o\x00", testTime.Unix()))
	b[156] = typeflag
	if gnu {
		copy(b[257:], "ustar  \x00")
	} else {
		copy(b[257:], "ustar\x0000")
	}
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	out := append(b[:], body...)
	if pad := len(body) % 512; pad != 0 {
		out = append(out, make([]byte, 512-pad)...)
	}
	return out
}

// rawTar joins raw entries and ends the archive.
func rawTar(parts ...[]byte) []byte {
	return append(bytes.Join(parts, nil), make([]byte, 1024)...)
}

// tarPAXRecords encodes PAX records, each "<length> key=value\n" with its own length counted.
func tarPAXRecords(kv ...string) []byte {
	var out []byte
	for i := 0; i < len(kv); i += 2 {
		rec := " " + kv[i] + "=" + kv[i+1] + "\n"
		n := len(rec) + 1
		for len(fmt.Sprint(n))+len(rec) != n {
			n++
		}
		out = append(out, fmt.Sprintf("%d%s", n, rec)...)
	}
	return out
}

// filterCase is an archive that must be refused, and how.
type filterCase struct {
	name  string
	data  []byte
	check Check
	entry string // the refused entry's name, as the archive spells it
	why   string // a part of the reason
}

// refusedCases are the crafted archives Filter must refuse under filterRules. The fuzz test starts
// from them too.
func refusedCases(tb testing.TB) []filterCase {
	tb.Helper()
	many := []tarEntry{dirEntry("workspace/")}
	for i := range 100 {
		many = append(many, regEntry(fmt.Sprintf("workspace/f%d", i), ""))
	}
	deep := "workspace/" + strings.Repeat("d/", 100) + "f"
	sparseOld := rawTar(rawTarEntry(tar.TypeGNUSparse, "workspace/s", 0, nil, true))
	sparsePAX := rawTar(
		rawTarEntry(tar.TypeXHeader, "PaxHeaders/s", int64(len(tarPAXRecords("GNU.sparse.numblocks", "1", "GNU.sparse.map", "0,4", "GNU.sparse.size", "4"))),
			tarPAXRecords("GNU.sparse.numblocks", "1", "GNU.sparse.map", "0,4", "GNU.sparse.size", "4"), false),
		rawTarEntry(tar.TypeReg, "workspace/s", 4, []byte("data"), false))
	cut := tarArchive(tb, regEntry("workspace/f", strings.Repeat("x", 2000)))
	cut = cut[:len(cut)-1500] // in the content: 1024 bytes of trailer and 48 of padding follow it
	nulPath := tarPAXRecords("path", "workspace/a\x00/etc/passwd")
	return []filterCase{
		{"symlink to / then a file through it", tarArchive(tb, dirEntry("workspace/"), symlinkEntry("workspace/root", "/"), regEntry("workspace/root/etc/passwd", "x")),
			PathCheck, "workspace/root/etc/passwd", `goes through "workspace/root", a symlink`},
		{"symlink in a root then a file through a/./link/x", tarArchive(tb, dirEntry("workspace/a/"), symlinkEntry("workspace/a/link", "../../.."), regEntry("workspace/a/./link/x", "x")),
			PathCheck, "workspace/a/./link/x", `"workspace/a/link", a symlink`},
		{"symlink in a root then a file through a//link/x", tarArchive(tb, symlinkEntry("workspace/a/link", "/etc"), regEntry("workspace//a//link/x", "x")),
			PathCheck, "workspace//a//link/x", `"workspace/a/link", a symlink`},
		{"symlink then a directory and a file through it", tarArchive(tb, symlinkEntry("workspace/link", "/etc"), dirEntry("workspace/link/sub/")),
			PathCheck, "workspace/link/sub/", `"workspace/link", a symlink`},
		{"symlink under the second root then a file through it", tarArchive(tb, symlinkEntry("tmp/cache/l", "/"), regEntry("tmp/cache/l/x", "x")),
			PathCheck, "tmp/cache/l/x", "a symlink"},
		{"hard link named through a symlink", tarArchive(tb, regEntry("workspace/f", "x"), symlinkEntry("workspace/l", "/etc"), linkEntry("workspace/l/h", "workspace/f")),
			PathCheck, "workspace/l/h", "a symlink"},
		{"file through a file", tarArchive(tb, regEntry("workspace/f", "x"), regEntry("workspace/f/x", "x")),
			PathCheck, "workspace/f/x", "a regular file"},
		{"../ at the front", tarArchive(tb, regEntry("../etc/passwd", "x")), NameCheck, "../etc/passwd", `".."`},
		{"../ out of a root", tarArchive(tb, regEntry("workspace/../../etc/passwd", "x")), NameCheck, "workspace/../../etc/passwd", `".."`},
		{"../ that cleans to a safe name", tarArchive(tb, regEntry("workspace/a/../b", "x")), NameCheck, "workspace/a/../b", `".."`},
		{"absolute name", tarArchive(tb, regEntry("/etc/passwd", "x")), NameCheck, "/etc/passwd", "absolute"},
		{"absolute name of a root", tarArchive(tb, regEntry("/workspace/x", "x")), NameCheck, "/workspace/x", "absolute"},
		{"empty name", tarArchive(tb, regEntry("", "x")), NameCheck, "", "empty"},
		{"dot", tarArchive(tb, dirEntry("./")), NameCheck, "./", `ending in "."`},
		{"name ending in a dot", tarArchive(tb, dirEntry("workspace/.")), NameCheck, "workspace/.", `ending in "."`},
		{"file named with a trailing slash", rawTar(rawTarEntry(tar.TypeReg, "workspace/f/", 0, nil, false)), NameCheck, "workspace/f/", "slash"},
		{"symlink named with a trailing slash", tarArchive(tb, symlinkEntry("workspace/l/", "x")), NameCheck, "workspace/l/", "slash"},
		{"component over NAME_MAX", tarArchive(tb, regEntry("workspace/"+strings.Repeat("n", 256), "x")), NameCheck, "workspace/" + strings.Repeat("n", 256), "longer than Linux allows (255)"},
		{"name over PATH_MAX", tarArchive(tb, regEntry("workspace/"+strings.Repeat("n/", 2043)+"end", "x")), NameCheck, ("workspace/" + strings.Repeat("n/", 2043) + "end")[:maxTarPath], "longer than Linux allows (4095)"},
		{"NUL in a PAX path", rawTar(rawTarEntry(tar.TypeXHeader, "PaxHeaders/a", int64(len(nulPath)), nulPath, false), rawTarEntry(tar.TypeReg, "a", 0, nil, false)),
			FormatCheck, "", "invalid"},
		{"outside the roots", tarArchive(tb, regEntry("etc/passwd", "x")), RootCheck, "etc/passwd", "outside every root"},
		{"a sibling of a root sharing its prefix", tarArchive(tb, regEntry("workspace2/x", "x")), RootCheck, "workspace2/x", "outside every root"},
		{"beside the root under tmp", tarArchive(tb, regEntry("tmp/x", "x")), RootCheck, "tmp/x", "outside every root"},
		{"the parent of a root", tarArchive(tb, dirEntry("tmp/")), RootCheck, "tmp/", "outside every root"},
		{"a root as a symlink", tarArchive(tb, symlinkEntry("workspace", "/")), RootCheck, "workspace", "a root may only be a directory, not a symlink"},
		{"a root as a file", tarArchive(tb, regEntry("tmp/cache", "x")), RootCheck, "tmp/cache", "a root may only be a directory"},
		{"hard link to /etc/passwd", tarArchive(tb, linkEntry("workspace/h", "/etc/passwd")), LinkCheck, "workspace/h", "absolute"},
		{"hard link out with ..", tarArchive(tb, linkEntry("workspace/h", "workspace/../../etc/passwd")), LinkCheck, "workspace/h", `".."`},
		{"hard link to a file outside the roots", tarArchive(tb, linkEntry("workspace/h", "etc/shadow")), LinkCheck, "workspace/h", "outside every root"},
		{"hard link to a later entry", tarArchive(tb, linkEntry("workspace/h", "workspace/f"), regEntry("workspace/f", "x")), LinkCheck, "workspace/h", "not a regular file earlier"},
		{"hard link to itself", tarArchive(tb, linkEntry("workspace/h", "workspace/h")), LinkCheck, "workspace/h", "not a regular file earlier"},
		{"hard link to a symlink", tarArchive(tb, symlinkEntry("workspace/l", "/etc/passwd"), linkEntry("workspace/h", "workspace/l")), LinkCheck, "workspace/h", "not a regular file earlier"},
		{"hard link to a directory", tarArchive(tb, dirEntry("workspace/d/"), linkEntry("workspace/h", "workspace/d")), LinkCheck, "workspace/h", "not a regular file earlier"},
		{"hard link through a symlink", tarArchive(tb, symlinkEntry("workspace/l", "/etc"), linkEntry("workspace/h", "workspace/l/passwd")), LinkCheck, "workspace/h", "not a regular file earlier"},
		{"symlink with an empty target", tarArchive(tb, symlinkEntry("workspace/l", "")), LinkCheck, "workspace/l", "empty target"},
		{"symlink target over PATH_MAX", tarArchive(tb, symlinkEntry("workspace/l", strings.Repeat("t/", 2048))), LinkCheck, "workspace/l", "4096 bytes"},
		{"character device", tarArchive(tb, specialEntry("workspace/null", tar.TypeChar)), TypeCheck, "workspace/null", "character device"},
		{"block device", tarArchive(tb, specialEntry("workspace/sda", tar.TypeBlock)), TypeCheck, "workspace/sda", "block device"},
		{"FIFO", tarArchive(tb, specialEntry("workspace/fifo", tar.TypeFifo)), TypeCheck, "workspace/fifo", "FIFO"},
		{"GNU sparse file", sparseOld, TypeCheck, "workspace/s", "sparse"},
		{"PAX sparse file", sparsePAX, TypeCheck, "workspace/s", "sparse"},
		{"contiguous file", rawTar(rawTarEntry(tar.TypeCont, "workspace/c", 0, nil, false)), TypeCheck, "workspace/c", "type '7'"},
		{"directory replaced by a symlink", tarArchive(tb, dirEntry("workspace/d/"), symlinkEntry("workspace/d", "/etc")), ReplaceCheck, "workspace/d", "a symlink where a directory was"},
		{"implied directory replaced by a symlink", tarArchive(tb, regEntry("workspace/d/f", "x"), symlinkEntry("workspace/d", "/etc")), ReplaceCheck, "workspace/d", "a symlink where a directory entries are under was"},
		{"symlink replaced by a directory", tarArchive(tb, symlinkEntry("workspace/d", "/etc"), dirEntry("workspace/d/")), ReplaceCheck, "workspace/d/", "a directory where a symlink was"},
		{"file replaced by a symlink", tarArchive(tb, regEntry("workspace/f", "x"), symlinkEntry("workspace/f", "/etc/passwd")), ReplaceCheck, "workspace/f", "a symlink where a regular file was"},
		{"symlink replaced by a file", tarArchive(tb, symlinkEntry("workspace/f", "/etc/passwd"), regEntry("workspace/f", "x")), ReplaceCheck, "workspace/f", "a regular file where a symlink was"},
		{"file replaced by a hard link", tarArchive(tb, regEntry("workspace/f", "x"), regEntry("workspace/g", "y"), linkEntry("workspace/f", "workspace/g")), ReplaceCheck, "workspace/f", "a hard link where a regular file was"},
		{"content over the limit", tarArchive(tb, regEntry("workspace/a", strings.Repeat("a", 40<<10)), regEntry("workspace/b", strings.Repeat("b", 40<<10))),
			SizeCheck, "workspace/b", "declares 40960 bytes, and with the 40960 before it the archive's content would be over its limit of 65536 bytes"},
		{"too many entries", tarArchive(tb, many...), EntriesCheck, "workspace/f99", "more than 100 entries"},
		{"too many implied directories", tarArchive(tb, regEntry(deep, "x")), EntriesCheck, deep, "counting the directories they imply"},
		{"global header that renames", tarArchive(tb, tarEntry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"path": "etc/passwd", "comment": "c"}}}, regEntry("workspace/f", "x")),
			FormatCheck, "etc/passwd", `records "path"`}, // archive/tar names the header by its path record
		{"directory that declares content", rawTar(rawTarEntry(tar.TypeDir, "workspace/d/", 512, make([]byte, 512), false)), FormatCheck, "workspace/d/", "declares 512 bytes"},
		{"not an archive", bytes.Repeat([]byte("not a tar archive\n"), 64), FormatCheck, "", "not a tar archive it can read"},
		{"cut short in a file's content", cut, FormatCheck, "workspace/f", "its content cannot be read: unexpected EOF"},
	}
}

func TestFilterRefuses(t *testing.T) {
	for _, tc := range refusedCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := Filter(bytes.NewReader(tc.data), &out, filterRules())
			var ref *Refused
			if !errors.As(err, &ref) {
				t.Fatalf("Filter = %v, want a *Refused", err)
			}
			if ref.Check != tc.check || ref.Entry != tc.entry || !strings.Contains(ref.Why, tc.why) {
				t.Errorf("refused %s %q: %s; want %s %q: ...%s...", ref.Check, ref.Entry, ref.Why, tc.check, tc.entry, tc.why)
			}
			if tc.entry != "" && !strings.Contains(err.Error(), fmt.Sprintf("%.256q", tc.entry)) {
				t.Errorf("the message %q does not name the entry", err)
			}
			// What was written before the refusal is entries that passed, and nothing of the
			// refused one but where its content could not be read after its header.
			assertFiltered(t, out.Bytes(), filterRules(), false)
			written := 0
			for tr := tar.NewReader(bytes.NewReader(out.Bytes())); ; written++ {
				if _, err := tr.Next(); err != nil {
					break
				}
			}
			if written > ref.Index && !strings.Contains(ref.Why, "content cannot be read") {
				t.Errorf("%d entries written before refusing entry %d", written, ref.Index)
			}
		})
	}
}

// tarCountingReader counts the bytes read through it.
type tarCountingReader struct {
	r io.Reader
	n int64
}

func (c *tarCountingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// A file whose declared size is over the limit is refused on its header: the megabyte of
// content behind it is never read, so an archive cannot make Filter read through a large body
// before refusing it.
func TestFilterRefusesSizeBeforeReadingContent(t *testing.T) {
	data := tarArchive(t, dirEntry("workspace/"), regEntry("workspace/big", strings.Repeat("x", 1<<20)))
	src := &tarCountingReader{r: bytes.NewReader(data)}
	_, err := Filter(src, io.Discard, filterRules())
	var ref *Refused
	if !errors.As(err, &ref) || ref.Check != SizeCheck || ref.Entry != "workspace/big" {
		t.Fatalf("Filter = %v, want a size refusal of workspace/big", err)
	}
	for _, n := range []string{"1048576", "65536"} {
		if !strings.Contains(ref.Why, n) {
			t.Errorf("the reason %q does not say %s", ref.Why, n)
		}
	}
	if src.n > 4<<10 {
		t.Errorf("read %d bytes of a %d-byte archive before refusing; want only the headers", src.n, len(data))
	}
}

// tarWorkspace is an ordinary workspace, already normal (owned by filterRules' owner, no
// special mode bits, no PAX records but those archive/tar needs), with every type Filter
// passes: directories, files of several modes, an empty file, absolute and relative symlinks,
// a hard link, long and non-ASCII names, nanosecond times, and the second root.
func tarWorkspace(tb testing.TB) []tarEntry {
	tb.Helper()
	long := "workspace/" + strings.Repeat("deep/", 30) + strings.Repeat("n", 200)
	ro := regEntry("workspace/src/ro.txt", "read only\n")
	ro.hdr.Mode = 0o444
	run := regEntry("workspace/bin/run.sh", "#!/bin/sh\necho hi\n")
	run.hdr.Mode = 0o755
	private := dirEntry("workspace/private/")
	private.hdr.Mode = 0o700
	old := regEntry("workspace/old.txt", "1970\n")
	old.hdr.ModTime = time.Unix(0, 0)
	entries := []tarEntry{
		dirEntry("workspace/"),
		dirEntry("workspace/src/"),
		regEntry("workspace/src/main.go", "package main\n\nfunc main() {}\n"),
		ro,
		dirEntry("workspace/bin/"),
		run,
		private,
		regEntry("workspace/private/notes", strings.Repeat("n", 1500)),
		regEntry("workspace/empty", ""),
		old,
		symlinkEntry("workspace/main", "src/main.go"),
		symlinkEntry("workspace/python", "/usr/bin/python3"),
		symlinkEntry("workspace/up", "../tmp/cache"),
		symlinkEntry("workspace/dangling", "nowhere"),
		linkEntry("workspace/main.hard", "workspace/src/main.go"),
		dirEntry("workspace/café/"),
		regEntry("workspace/café/naïve.txt", "ünïcode\n"),
	}
	for d := "workspace/deep/"; len(d) <= len(long)-200; d += "deep/" {
		entries = append(entries, dirEntry(d))
	}
	entries = append(entries, regEntry(long, "long\n"), dirEntry("tmp/cache/"), regEntry("tmp/cache/pip.whl", "wheel"))
	return entries
}

// A normal workspace passes entry for entry: the same headers, the same bytes.
func TestFilterRoundTrip(t *testing.T) {
	entries := tarWorkspace(t)
	var out bytes.Buffer
	sum, err := Filter(bytes.NewReader(tarArchive(t, entries...)), &out, filterRules())
	if err != nil {
		t.Fatal(err)
	}
	got := readTar(t, out.Bytes())
	if len(got) != len(entries) {
		t.Fatalf("wrote %d entries, want %d", len(got), len(entries))
	}
	want := Summary{Entries: len(entries), Owners: []Owner{{UID: 1000, GID: 1001}}}
	for i, e := range entries {
		g := got[i]
		w := e.hdr
		if w.Typeflag == tar.TypeReg {
			w.Size = int64(len(e.body))
		}
		if g.hdr.Name != w.Name || g.hdr.Typeflag != w.Typeflag || g.hdr.Linkname != w.Linkname || g.hdr.Mode != w.Mode ||
			g.hdr.Uid != w.Uid || g.hdr.Gid != w.Gid || g.hdr.Uname != "" || g.hdr.Gname != "" || g.hdr.Size != w.Size || !g.hdr.ModTime.Equal(w.ModTime) {
			t.Errorf("entry %d:\n got %+v\nwant %+v", i, g.hdr, w)
		}
		if g.body != e.body {
			t.Errorf("entry %q: content %q, want %q", w.Name, g.body, e.body)
		}
		switch w.Typeflag {
		case tar.TypeReg:
			want.Files++
			want.Bytes += w.Size
		case tar.TypeDir:
			want.Dirs++
		case tar.TypeSymlink:
			want.Symlinks++
		case tar.TypeLink:
			want.Links++
		}
	}
	if fmt.Sprint(sum) != fmt.Sprint(want) {
		t.Errorf("summary %+v, want %+v", sum, want)
	}
	assertFiltered(t, out.Bytes(), filterRules(), true)
}

// What the archive says beyond names, types, permissions, times and content is not written:
// owners (reported), special mode bits, extended attributes and other PAX records, access and
// change times. Names are cleaned and a directory's ends in a slash.
func TestFilterNormalizes(t *testing.T) {
	setuid := regEntry("workspace/su", "#!/bin/sh\n")
	setuid.hdr.Mode = 0o4755
	setuid.hdr.Uid, setuid.hdr.Gid, setuid.hdr.Uname, setuid.hdr.Gname = 0, 0, "root", "root"
	setgid := dirEntry("workspace/shared")
	setgid.hdr.Mode = 0o2775 | 0o1000
	setgid.hdr.Uid, setgid.hdr.Gid = 0, 50
	capable := regEntry("./workspace//ping", "binary")
	capable.hdr.Mode = 0o755
	capable.hdr.PAXRecords = map[string]string{
		"SCHILY.xattr.security.capability":  "\x01\x00\x00\x02\x00\x20\x00\x00",
		"SCHILY.xattr.user.note":            "x",
		"LIBARCHIVE.xattr.security.selinux": "c3lzdGVtX3U6b2JqZWN0X3I6YmluX3Q6czA=",
		"SCHILY.acl.access":                 "user::rwx,user:0:rwx",
		"GNU.comment":                       "kept nowhere",
	}
	capable.hdr.AccessTime = time.Unix(1_800_000_000, 1)
	capable.hdr.ChangeTime = time.Unix(1_800_000_000, 2)
	var out bytes.Buffer
	sum, err := Filter(bytes.NewReader(tarArchive(t, dirEntry("workspace"), setuid, setgid, capable)), &out, filterRules())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name string
		mode int64
	}{{"workspace/", 0o755}, {"workspace/su", 0o755}, {"workspace/shared/", 0o775}, {"workspace/ping", 0o755}}
	got := readTar(t, out.Bytes())
	if len(got) != len(want) {
		t.Fatalf("wrote %d entries, want %d", len(got), len(want))
	}
	for i, w := range want {
		h := got[i].hdr
		if h.Name != w.name || h.Mode != w.mode || h.Uid != 1000 || h.Gid != 1001 || h.Uname != "" || h.Gname != "" {
			t.Errorf("entry %d: %q mode %o owner %d:%d (%q:%q), want %q mode %o owner 1000:1001", i, h.Name, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, w.name, w.mode)
		}
		if !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("entry %q keeps atime %v, ctime %v", h.Name, h.AccessTime, h.ChangeTime)
		}
		for k := range h.PAXRecords {
			if k != "mtime" && k != "path" {
				t.Errorf("entry %q keeps PAX record %q", h.Name, k)
			}
		}
	}
	for _, b := range []string{"security.capability", "SCHILY", "LIBARCHIVE", "GNU.comment", "root", "atime", "ctime"} {
		if bytes.Contains(out.Bytes(), []byte(b)) {
			t.Errorf("the output holds %q", b)
		}
	}
	owners := []Owner{{UID: 1000, GID: 1001}, {UID: 0, GID: 0, User: "root", Group: "root"}, {UID: 0, GID: 50}}
	if fmt.Sprint(sum.Owners) != fmt.Sprint(owners) || sum.MoreOwners {
		t.Errorf("owners %+v (more: %v), want %+v", sum.Owners, sum.MoreOwners, owners)
	}
}

// An archive may list a directory or a file twice (tar -c of overlapping paths does), and a
// git archive's global comment header is dropped: none of it changes a type, so it passes.
func TestFilterPassesRepeatsAndComments(t *testing.T) {
	comment := tarEntry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "0123abcd"}}}
	data := tarArchive(t, comment, dirEntry("workspace/"), dirEntry("workspace/d/"), regEntry("workspace/d/f", "1"), dirEntry("workspace/d/"),
		regEntry("workspace/d/f", "2"), symlinkEntry("workspace/l", "a"), symlinkEntry("workspace/l", "b"), linkEntry("workspace/h", "workspace/d/f"),
		linkEntry("workspace/h", "workspace/d/f"))
	var out bytes.Buffer
	sum, err := Filter(bytes.NewReader(data), &out, filterRules())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Entries != 9 || sum.Dirs != 3 || sum.Files != 2 || sum.Symlinks != 2 || sum.Links != 2 || sum.Bytes != 2 {
		t.Errorf("summary %+v", sum)
	}
	if bytes.Contains(out.Bytes(), []byte("0123abcd")) {
		t.Error("the global comment was written")
	}
}

// Owners are reported up to a bound, however many the archive names, and however long.
func TestFilterBoundsOwners(t *testing.T) {
	entries := []tarEntry{dirEntry("workspace/")}
	for i := range 40 {
		e := regEntry(fmt.Sprintf("workspace/f%d", i), "")
		e.hdr.Uid, e.hdr.Uname = i, strings.Repeat("u", 100)
		entries = append(entries, e)
	}
	sum, err := Filter(bytes.NewReader(tarArchive(t, entries...)), io.Discard, filterRules())
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Owners) != maxOwners || !sum.MoreOwners {
		t.Errorf("%d owners (more: %v), want %d and more", len(sum.Owners), sum.MoreOwners, maxOwners)
	}
	if len(sum.Owners[1].User) != maxOwnerName {
		t.Errorf("an owner's name of %d bytes, want it clipped to %d", len(sum.Owners[1].User), maxOwnerName)
	}
}

// flakyReader fails after its bytes, as a store that goes away mid-download.
type flakyReader struct {
	r   io.Reader
	err error
}

func (e *flakyReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, e.err
	}
	return n, err
}

type flakyWriter struct{ err error }

func (e flakyWriter) Write([]byte) (int, error) { return 0, e.err }

// A reader or writer that fails is not the archive's fault: its error comes back, wrapped,
// never as a refusal a caller would answer 400 with.
func TestFilterReaderAndWriterErrors(t *testing.T) {
	data := tarArchive(t, dirEntry("workspace/"), regEntry("workspace/f", strings.Repeat("x", 3000)))
	gone := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		r    io.Reader
		w    io.Writer
	}{
		{"reader fails in a header", &flakyReader{bytes.NewReader(data[:700]), gone}, io.Discard},
		{"reader fails in content", &flakyReader{bytes.NewReader(data[:2000]), gone}, io.Discard},
		{"writer fails", bytes.NewReader(data), flakyWriter{gone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Filter(tc.r, tc.w, filterRules())
			var ref *Refused
			if !errors.Is(err, gone) || errors.As(err, &ref) {
				t.Errorf("Filter = %v, want the I/O error and no refusal", err)
			}
		})
	}
}

func TestRulesValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Rules)
		want string
	}{
		{"no roots", func(r *Rules) { r.Roots = nil }, "Roots: at least one"},
		{"absolute root", func(r *Rules) { r.Roots = []string{"/workspace"} }, `Roots[0] "/workspace": an absolute name`},
		{"root with ..", func(r *Rules) { r.Roots = []string{"workspace", "tmp/../etc"} }, `Roots[1] "tmp/../etc": a ".."`},
		{"root not clean", func(r *Rules) { r.Roots = []string{"workspace/"} }, "must be clean"},
		{"root of dots", func(r *Rules) { r.Roots = []string{"./workspace"} }, "must be clean"},
		{"empty root", func(r *Rules) { r.Roots = []string{""} }, "an empty name"},
		{"negative UID", func(r *Rules) { r.UID = -1 }, "UID: must be >= 0"},
		{"no bytes", func(r *Rules) { r.MaxBytes = 0 }, "MaxBytes: must be > 0"},
		{"no entries", func(r *Rules) { r.MaxEntries = 0 }, "MaxEntries: must be > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := filterRules()
			tc.edit(&r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ...%s...", err, tc.want)
			}
			// Filter checks its rules before it reads a byte, and a bad rule is no refusal.
			_, ferr := Filter(strings.NewReader("anything"), io.Discard, r)
			var ref *Refused
			if ferr == nil || errors.As(ferr, &ref) {
				t.Errorf("Filter = %v, want the rules' error", ferr)
			}
		})
	}
	if err := filterRules().Validate(); err != nil {
		t.Errorf("testRules: %v", err)
	}
}

// tarRead is an entry read back from an archive.
type tarRead struct {
	hdr  *tar.Header
	body string
}

// readTar reads a whole archive, which must be well formed.
func readTar(tb testing.TB, data []byte) []tarRead {
	tb.Helper()
	var out []tarRead
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			tb.Fatalf("reading the output after %d entries: %v", len(out), err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			tb.Fatalf("reading %q: %v", hdr.Name, err)
		}
		out = append(out, tarRead{hdr, string(body)})
	}
}

// assertFiltered checks what Filter promises of its output, written independently of it (a
// map of full names, not its tree): every entry is a regular file, directory, symlink or hard
// link, normalized, at or under a root, through no symlink or file an earlier one made, of the
// type its name already had if any, a hard link to an earlier regular file; the content and
// entries are within the limits. whole says the output must be a complete archive; else it may
// end anywhere (Filter refused an entry after writing others).
func assertFiltered(tb testing.TB, data []byte, rules Rules, whole bool) {
	tb.Helper()
	made := map[string]byte{} // a full name → its type flag, or 'i' for a directory implied
	var content int64
	entries := 0
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if whole {
				tb.Fatalf("output entry %d: %v", entries, err)
			}
			break
		}
		entries++
		name := hdr.Name
		fail := func(format string, args ...any) {
			tb.Helper()
			tb.Fatalf("output entry %q: %s", name, fmt.Sprintf(format, args...))
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			fail("type %q", hdr.Typeflag)
		}
		if hdr.Mode&^0o777 != 0 || hdr.Uid != rules.UID || hdr.Gid != rules.GID || hdr.Uname != "" || hdr.Gname != "" {
			fail("mode %o, owner %d:%d (%q:%q)", hdr.Mode, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname)
		}
		if !hdr.AccessTime.IsZero() || !hdr.ChangeTime.IsZero() {
			fail("access or change time")
		}
		for k := range hdr.PAXRecords {
			if k != "path" && k != "linkpath" && k != "mtime" && k != "size" {
				fail("PAX record %q", k)
			}
		}
		clean := strings.TrimSuffix(name, "/")
		if (hdr.Typeflag == tar.TypeDir) != (clean != name) {
			fail("a trailing slash on a %q or none on a directory", hdr.Typeflag)
		}
		if !cleanTarName(clean) {
			fail("not a clean relative name")
		}
		root := ""
		for _, r := range rules.Roots {
			if clean == r || strings.HasPrefix(clean, r+"/") {
				root = r
			}
		}
		if root == "" {
			fail("outside every root")
		}
		if clean == root && hdr.Typeflag != tar.TypeDir {
			fail("a root as a %q", hdr.Typeflag)
		}
		for i := range len(clean) {
			if clean[i] != '/' {
				continue
			}
			switch typ, ok := made[clean[:i]]; {
			case !ok:
				made[clean[:i]] = 'i'
			case typ != 'i' && typ != tar.TypeDir:
				fail("goes through %q, a %q", clean[:i], typ)
			}
		}
		typ := hdr.Typeflag
		if was, ok := made[clean]; ok && was != typ && !(was == 'i' && typ == tar.TypeDir) {
			fail("a %q where a %q was", typ, was)
		}
		switch typ {
		case tar.TypeLink:
			if made[hdr.Linkname] != tar.TypeReg || !cleanTarName(hdr.Linkname) {
				fail("a hard link to %q, a %q", hdr.Linkname, made[hdr.Linkname])
			}
		case tar.TypeSymlink:
			if hdr.Linkname == "" || len(hdr.Linkname) > maxTarPath || strings.IndexByte(hdr.Linkname, 0) >= 0 {
				fail("symlink target %q", hdr.Linkname)
			}
		case tar.TypeReg:
			content += hdr.Size
		}
		if hdr.Typeflag != tar.TypeReg && hdr.Size != 0 {
			fail("a size of %d", hdr.Size)
		}
		made[clean] = typ
	}
	if content > rules.MaxBytes || entries > rules.MaxEntries {
		tb.Fatalf("%d bytes in %d entries, over the limits %d and %d", content, entries, rules.MaxBytes, rules.MaxEntries)
	}
}

// cleanTarName says name is relative, with no empty, "." or ".." component.
func cleanTarName(name string) bool {
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// gnuTar returns GNU tar's path, or skips the test saying why: the sandbox unpacks with it.
func gnuTar(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar on PATH: the GNU tar tests need GNU tar")
	}
	if out, err := exec.Command(path, "--version").Output(); err != nil || !bytes.Contains(out, []byte("GNU tar")) {
		t.Skipf("%s is not GNU tar (%v): the GNU tar tests need it", path, err)
	}
	return path
}

// untar unpacks data with GNU tar as a restore does (not as root's owner, in the C locale), into
// a new directory it returns. -p keeps the modes whatever the umask of the test.
func untar(t *testing.T, tarPath string, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(tarPath, "-x", "--no-same-owner", "-p", "-C", dir, "-f", "-")
	cmd.Stdin = bytes.NewReader(data)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	return dir
}

// fsEntry is what the GNU tar tests compare of a name on disk.
type fsEntry struct {
	Type    string // "dir", "file" or "symlink"
	Mode    fs.FileMode
	ModTime time.Time
	Content string // a file's content or a symlink's target
	// Links are the names sharing the file's inode, sorted, when there are several.
	Links string
}

// fsTree lists what is at and under each root of base, with times truncated to precision.
func fsTree(t *testing.T, base string, roots []string, precision time.Duration) map[string]fsEntry {
	t.Helper()
	tree := map[string]fsEntry{}
	inodes := map[uint64][]string{}
	for _, root := range roots {
		err := filepath.WalkDir(filepath.Join(base, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			name, _ := filepath.Rel(base, p)
			e := fsEntry{Mode: info.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), ModTime: info.ModTime().Truncate(precision)}
			switch {
			case d.IsDir():
				e.Type = "dir"
			case d.Type()&fs.ModeSymlink != 0:
				e.Type, e.Mode = "symlink", 0
				if e.Content, err = os.Readlink(p); err != nil {
					return err
				}
			case d.Type().IsRegular():
				e.Type = "file"
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				e.Content = string(b)
				ino := info.Sys().(*syscall.Stat_t).Ino
				inodes[ino] = append(inodes[ino], name)
			default:
				e.Type = info.Mode().Type().String()
			}
			tree[name] = e
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, names := range inodes {
		if len(names) > 1 {
			slices.Sort(names)
			for _, name := range names {
				e := tree[name]
				e.Links = strings.Join(names, " ")
				tree[name] = e
			}
		}
	}
	return tree
}

// diffTrees reports each name whose entry differs between want and got.
func diffTrees(t *testing.T, want, got map[string]fsEntry) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: missing", name)
		} else if w := want[name]; !w.ModTime.Equal(g.ModTime) || w.Type != g.Type || w.Mode != g.Mode || w.Content != g.Content || w.Links != g.Links {
			t.Errorf("%s:\n got %s %v %v links %q %.40q\nwant %s %v %v links %q %.40q", name, g.Type, g.Mode, g.ModTime, g.Links, g.Content,
				w.Type, w.Mode, w.ModTime, w.Links, w.Content)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: not expected", name)
		}
	}
}

// What passes unpacks with GNU tar as the entries say, and as the archive unfiltered would.
func TestFilterUnpacksWithGNUTar(t *testing.T) {
	tarPath := gnuTar(t)
	entries := tarWorkspace(t)
	in := tarArchive(t, entries...)
	var out bytes.Buffer
	if _, err := Filter(bytes.NewReader(in), &out, filterRules()); err != nil {
		t.Fatal(err)
	}
	want := map[string]fsEntry{}
	for _, e := range entries {
		name := strings.TrimSuffix(e.hdr.Name, "/")
		w := fsEntry{Mode: fs.FileMode(e.hdr.Mode), ModTime: e.hdr.ModTime, Content: e.body}
		switch e.hdr.Typeflag {
		case tar.TypeDir:
			w.Type = "dir"
		case tar.TypeReg:
			w.Type = "file"
		case tar.TypeSymlink:
			w.Type, w.Mode, w.Content = "symlink", 0, e.hdr.Linkname
		case tar.TypeLink:
			target := want[e.hdr.Linkname]
			target.Links = strings.Join(slices.Sorted(slices.Values([]string{e.hdr.Linkname, name})), " ")
			want[e.hdr.Linkname] = target
			w = target
		}
		want[name] = w
	}
	got := fsTree(t, untar(t, tarPath, out.Bytes()), filterRules().Roots, 1)
	diffTrees(t, want, got)
	diffTrees(t, fsTree(t, untar(t, tarPath, in), filterRules().Roots, 1), got)
}

// The setuid bit the archive asks for is not what GNU tar makes of the output; it is of the
// input, run as root, which is why it is dropped.
func TestFilterDropsSetuidForGNUTar(t *testing.T) {
	tarPath := gnuTar(t)
	su := regEntry("workspace/su", "#!/bin/sh\n")
	su.hdr.Mode = 0o4755
	shared := dirEntry("workspace/shared/")
	shared.hdr.Mode = 0o3777
	in := tarArchive(t, dirEntry("workspace/"), su, shared)
	var out bytes.Buffer
	if _, err := Filter(bytes.NewReader(in), &out, filterRules()); err != nil {
		t.Fatal(err)
	}
	got := fsTree(t, untar(t, tarPath, out.Bytes()), []string{"workspace"}, 1)
	if m := got["workspace/su"].Mode; m != 0o755 {
		t.Errorf("workspace/su unpacked with mode %v, want -rwxr-xr-x", m)
	}
	if m := got["workspace/shared"].Mode; m != 0o777 {
		t.Errorf("workspace/shared unpacked with mode %v, want -rwxrwxrwx", m)
	}
	if os.Geteuid() == 0 {
		if m := fsTree(t, untar(t, tarPath, in), []string{"workspace"}, 1)["workspace/su"].Mode; m&fs.ModeSetuid == 0 {
			t.Errorf("the unfiltered archive unpacked with mode %v: the test no longer shows what the filter prevents", m)
		}
	}
}

// A workspace as GNU tar archives it in the sandbox (both formats a template may use) passes
// and unpacks into the same tree: types, modes, times, contents, link targets and hard links.
func TestFilterGNUTarRoundTrip(t *testing.T) {
	tarPath := gnuTar(t)
	src := t.TempDir()
	mustMkdir := func(name string, mode fs.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(src, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(src, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	var content int64
	mustWrite := func(name, body string, mode fs.FileMode) {
		t.Helper()
		content += int64(len(body))
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(src, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	long := filepath.Join("workspace", strings.Repeat("deep/", 30))
	for _, d := range []string{"workspace", "workspace/src", "workspace/café", "workspace/private", long, "tmp/cache/pip"} {
		mustMkdir(d, 0o755)
	}
	mustWrite("workspace/src/main.go", "package main\n", 0o644)
	mustWrite("workspace/src/run.sh", "#!/bin/sh\n", 0o755)
	mustWrite("workspace/src/ro.txt", "read only\n", 0o444)
	mustWrite("workspace/café/naïve.txt", "ünïcode\n", 0o600)
	mustWrite(filepath.Join(long, strings.Repeat("n", 200)), "long\n", 0o644)
	mustWrite("workspace/private/notes", "mine\n", 0o600)
	mustWrite("workspace/empty", "", 0o644)
	big := make([]byte, 100<<10)
	for i := range big {
		big[i] = byte(i*7 + i/251)
	}
	mustWrite("workspace/big", string(big), 0o644)
	mustWrite("tmp/cache/pip/x.whl", "wheel", 0o644)
	for name, target := range map[string]string{"workspace/link": "src/main.go", "workspace/abs": "/etc/hostname", "workspace/up": "../tmp/cache"} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(src, "workspace/src/main.go"), filepath.Join(src, "workspace/hard")); err != nil {
		t.Fatal(err)
	}
	// Times with nanoseconds, set deepest first so a directory's is not changed after.
	var names []string
	for name := range fsTree(t, src, filterRules().Roots, 1) {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for i, name := range names {
		ts := time.Unix(1_600_000_000+int64(i)*3600, int64(i)*1_000_003)
		if err := unix.Lutimes(filepath.Join(src, name), []unix.Timeval{unix.NsecToTimeval(ts.UnixNano()), unix.NsecToTimeval(ts.UnixNano())}); err != nil {
			t.Fatal(err)
		}
	}
	mustMkdir("workspace/private", 0o700)
	for _, tc := range []struct {
		format    string
		precision time.Duration
	}{{"gnu", time.Second}, {"pax", time.Microsecond}} {
		t.Run(tc.format, func(t *testing.T) {
			cmd := exec.Command(tarPath, "-c", "--numeric-owner", "--format="+tc.format, "-C", src, "--", "workspace", "tmp/cache")
			cmd.Env = append(os.Environ(), "LC_ALL=C")
			in, err := cmd.Output()
			if err != nil {
				t.Fatalf("tar -c: %v", err)
			}
			rules := filterRules()
			rules.UID, rules.GID, rules.MaxBytes, rules.MaxEntries = os.Getuid(), os.Getgid(), 1<<20, 1000
			var out bytes.Buffer
			sum, err := Filter(bytes.NewReader(in), &out, rules)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Symlinks != 3 || sum.Links != 1 || sum.Bytes != content {
				t.Errorf("summary %+v", sum)
			}
			want := fsTree(t, src, rules.Roots, tc.precision)
			got := fsTree(t, untar(t, tarPath, out.Bytes()), rules.Roots, tc.precision)
			diffTrees(t, want, got)
			diffTrees(t, fsTree(t, untar(t, tarPath, in), rules.Roots, tc.precision), got)
		})
	}
}
