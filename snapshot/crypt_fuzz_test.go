package snapshot

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzBlob alters a sealed blob (a byte changed, the end cut, bytes appended) and checks that it
// no longer opens, and that what was returned before the failure is the archive's. The archive
// is made from a seed and a size (up to three chunks and a bit), so inputs stay small.
func FuzzBlob(f *testing.F) {
	f.Add("", uint32(0), uint32(0), byte(1), uint16(0), []byte(nil))
	f.Add("small", uint32(15), uint32(30), byte(0x20), uint16(0), []byte(nil))
	f.Add("x", uint32(ChunkSize+1), uint32(0), byte(0), uint16(17), []byte(nil))
	f.Add("y", uint32(2*ChunkSize), uint32(0), byte(0), uint16(0), []byte{0})
	key := bytes.Repeat([]byte{7}, 32)
	f.Fuzz(func(t *testing.T, seed string, size, pos uint32, flip byte, cut uint16, tail []byte) {
		archive := randomArchive(seed, int(size%(3*ChunkSize+100)))
		blob := sealBlob(t, "acme", key, archive)
		if got, err := unsealBlob(blob, "acme", key); err != nil || !bytes.Equal(got, archive) {
			t.Fatalf("the blob as sealed: %v", err)
		}
		b := bytes.Clone(blob)
		b[int(pos)%len(b)] ^= flip
		b = append(b[:len(b)-int(cut)%len(b)], tail...)
		if bytes.Equal(b, blob) {
			return // not altered after all
		}
		got, err := unsealBlob(b, "acme", key)
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrOtherTenant) {
			t.Fatalf("an altered blob opened: %d bytes, %v", len(got), err)
		}
		if !bytes.HasPrefix(archive, got) {
			t.Fatal("bytes that are not the archive's were returned")
		}
	})
}

// FuzzReadHeader reads any bytes as a blob: never a panic, and never an archive without the
// key it was sealed with.
func FuzzReadHeader(f *testing.F) {
	var blob bytes.Buffer
	w, _ := NewWriter(&blob, "acme", bytes.Repeat([]byte{7}, 32), []byte("vault:v1:wrapped"))
	w.Write([]byte("archive"))
	w.Close()
	f.Add(blob.Bytes())
	f.Add([]byte("ALSNAP\x01\x00\x02{}"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r := bytes.NewReader(raw)
		h, err := ReadHeader(r)
		if err != nil {
			return
		}
		dr, err := NewReader(r, h, h.Tenant, bytes.Repeat([]byte{8}, 32))
		if err != nil {
			return
		}
		if got, err := io.ReadAll(dr); err == nil {
			t.Fatalf("%d bytes opened under a key they were not sealed with", len(got))
		}
	})
}
