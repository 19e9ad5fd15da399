package snapshot

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzFilter feeds Filter arbitrary bytes, starting from the crafted archives of the tests (each
// attack, the normal workspace) and mutations of them. Whatever comes in:
//   - Filter refuses it with a *Refused or passes it (the reader and writer here cannot fail);
//   - what it wrote, whole or before a refusal, holds only regular files, directories, symlinks
//     and hard links, normalized, at or under a root, none through a symlink or file an earlier
//     entry made, none changing the type of a name, every hard link to an earlier regular file,
//     within the limits (assertFiltered, which checks with a model of its own);
//   - what passes is a fixed point: filtered again, it passes unchanged, byte for byte.
func FuzzFilter(f *testing.F) {
	for _, tc := range refusedCases(f) {
		if len(tc.data) <= 64<<10 {
			f.Add(tc.data)
		}
	}
	f.Add(tarArchive(f, tarWorkspace(f)...))
	f.Add(tarArchive(f, dirEntry("workspace/"), regEntry("workspace/f", "x"), linkEntry("workspace/h", "workspace/f"),
		symlinkEntry("workspace/l", "../.."), regEntry("tmp/cache/c", "y")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		rules := filterRules()
		var out bytes.Buffer
		sum, err := Filter(bytes.NewReader(data), &out, rules)
		var ref *Refused
		if err != nil && !errors.As(err, &ref) {
			t.Fatalf("Filter = %v, want a *Refused or nothing", err)
		}
		assertFiltered(t, out.Bytes(), rules, err == nil)
		if err != nil {
			return
		}
		var again bytes.Buffer
		sum2, err := Filter(bytes.NewReader(out.Bytes()), &again, rules)
		if err != nil {
			t.Fatalf("the output is refused: %v", err)
		}
		if !bytes.Equal(out.Bytes(), again.Bytes()) {
			t.Fatal("the output filtered again differs")
		}
		counts := func(s Summary) [6]int64 {
			return [6]int64{int64(s.Entries), int64(s.Files), int64(s.Dirs), int64(s.Symlinks), int64(s.Links), s.Bytes}
		}
		if counts(sum) != counts(sum2) {
			t.Fatalf("summary %+v, filtered again %+v", sum, sum2)
		}
	})
}

// FuzzFilterEntries reaches where FuzzFilter's mutations rarely do (a header's checksum stops
// most of them): data is read as a list of entries whose names and targets are made of a few
// components ("workspace", "tmp", "cache", "a", "l", ".", "..", ""), so symlinks, hard links,
// repeats and type changes meet each other often. The same invariants hold.
func FuzzFilterEntries(f *testing.F) {
	f.Add([]byte{2, 2, 0, 4, 1, 1, 0, 3, 0, 4, 3})          // workspace/l -> /workspace, then a file through it
	f.Add([]byte{1, 1, 0, 0, 2, 0, 4, 0, 3, 3, 0, 4, 1, 0}) // a directory, a file, a hard link to it
	f.Add([]byte{9, 3, 1, 2, 3, 2, 2, 1, 2, 3, 2, 3, 0, 4}) // the cache root, a symlink, a directory where it is
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		segments := []string{"workspace", "tmp", "cache", "a", "l", ".", "..", ""}
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		name := func() string {
			n := 1 + int(next()%4)
			parts := make([]string, n)
			for i := range parts {
				parts[i] = segments[next()%8]
			}
			return strings.Join(parts, "/")
		}
		types := []byte{tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo}
		for len(data) > 0 {
			op := next()
			hdr := &tar.Header{Typeflag: types[int(op)%len(types)], Name: name(), Mode: int64(op) << 4, Format: tar.FormatPAX}
			if op&0x80 != 0 {
				hdr.Name = "/" + hdr.Name
			}
			switch hdr.Typeflag {
			case tar.TypeSymlink, tar.TypeLink:
				hdr.Linkname = name()
			case tar.TypeReg:
				hdr.Size = int64(op % 3)
			}
			if tw.WriteHeader(hdr) != nil {
				return // a header archive/tar will not write (a file named with a trailing slash)
			}
			tw.Write(make([]byte, hdr.Size))
		}
		tw.Close()
		rules := filterRules()
		var out bytes.Buffer
		_, err := Filter(bytes.NewReader(buf.Bytes()), &out, rules)
		var ref *Refused
		if err != nil && !errors.As(err, &ref) {
			t.Fatalf("Filter = %v, want a *Refused or nothing", err)
		}
		assertFiltered(t, out.Bytes(), rules, err == nil)
	})
}
