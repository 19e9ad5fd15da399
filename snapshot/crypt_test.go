package snapshot

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// sealBlob returns archive sealed for tenant under key.
func sealBlob(t testing.TB, tenant string, key, archive []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := NewWriter(&out, tenant, key, []byte("vault:v1:wrapped"))
	if err != nil {
		t.Fatal(err)
	}
	// Written in odd pieces, so chunk boundaries fall inside writes.
	for p := archive; len(p) > 0; {
		n := min(len(p), 7777)
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Written() != int64(out.Len()) {
		t.Fatalf("Written() = %d, the blob is %d bytes", w.Written(), out.Len())
	}
	return out.Bytes()
}

// unsealBlob opens blob as tenant's with key, reading it to its end.
func unsealBlob(blob []byte, tenant string, key []byte) ([]byte, error) {
	r := bytes.NewReader(blob)
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	dr, err := NewReader(r, h, tenant, key)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(dr)
}

// randomArchive returns n bytes of pseudo-random archive, different for each seed.
func randomArchive(seed string, n int) []byte {
	out := make([]byte, 0, n+sha256.Size)
	block := sha256.Sum256([]byte(seed))
	for len(out) < n {
		out = append(out, block[:]...)
		block = sha256.Sum256(block[:])
	}
	return out[:n]
}

func newKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

// headerLen is the size of blob's header.
func headerLen(blob []byte) int {
	return len(blobMagic) + 3 + int(binary.BigEndian.Uint16(blob[len(blobMagic)+1:]))
}

const sealed = ChunkSize + 16

func TestBlobRoundTrip(t *testing.T) {
	key := newKey()
	for _, n := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 3*ChunkSize + 17} {
		a := randomArchive("round", n)
		blob := sealBlob(t, "acme", key, a)
		chunks := max(1, (n+ChunkSize-1)/ChunkSize)
		if want := headerLen(blob) + n + 16*chunks; len(blob) != want {
			t.Errorf("%d bytes: blob of %d bytes, want %d (%d chunks)", n, len(blob), want, chunks)
		}
		if bytes.Contains(blob, a[:min(n, 64)]) && n >= 16 {
			t.Errorf("%d bytes: the blob holds the archive in clear", n)
		}
		got, err := unsealBlob(blob, "acme", key)
		if err != nil || !bytes.Equal(got, a) {
			t.Fatalf("%d bytes: read back %d bytes, %v", n, len(got), err)
		}
	}
}

// TestBlobTamper alters every part of a blob and checks that reading it fails with ErrCorrupt
// (or ErrOtherTenant, for a header rewritten to another tenant) and returns no byte of an
// altered chunk.
func TestBlobTamper(t *testing.T) {
	key := newKey()
	a := randomArchive("tamper", 3*ChunkSize+100) // four chunks, the last short
	blob := sealBlob(t, "acme", key, a)
	hl := headerLen(blob)
	other := sealBlob(t, "acme", key, randomArchive("other", 3*ChunkSize+100)) // same key and tenant, another blob id
	globex := sealBlob(t, "globex", key, a)                                    // same key, another tenant
	chunk := func(b []byte, i int) []byte {
		start := headerLen(b) + i*sealed
		return b[start:min(len(b), start+sealed)]
	}
	flip := func(off int) []byte {
		b := bytes.Clone(blob)
		b[off] ^= 0x01
		return b
	}
	splice := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	hdr := blob[:hl]

	cases := []struct {
		name string
		blob []byte
	}{
		{"magic", flip(0)},
		{"version", flip(len(blobMagic))},
		{"header length", flip(len(blobMagic) + 2)},
		{"tenant in the header", bytes.Replace(blob, []byte(`"acme"`), []byte(`"acmf"`), 1)},
		{"blob id", flip(bytes.Index(blob, []byte(`"blob":"`)) + 8)},
		{"wrapped key", flip(bytes.Index(blob, []byte(`"key":"`)) + 8)},
		{"chunk size", bytes.Replace(blob, []byte(`"chunk":65536`), []byte(`"chunk":65535`), 1)},
		{"a byte of the first chunk", flip(hl)},
		{"a byte of a middle chunk", flip(hl + sealed + 5)},
		{"a tag", flip(hl + 2*sealed - 1)},
		{"the last byte", flip(len(blob) - 1)},
		{"no chunk", hdr},
		{"cut in the header", blob[:hl-1]},
		{"cut in a chunk", blob[:hl+sealed+100]},
		{"cut at a chunk boundary", blob[:hl+2*sealed]},
		{"last chunk dropped", splice(hdr, chunk(blob, 0), chunk(blob, 1), chunk(blob, 2))},
		{"chunks swapped", splice(hdr, chunk(blob, 1), chunk(blob, 0), chunk(blob, 2), chunk(blob, 3))},
		{"chunk repeated", splice(hdr, chunk(blob, 0), chunk(blob, 0), chunk(blob, 2), chunk(blob, 3))},
		{"chunk from another blob", splice(hdr, chunk(blob, 0), chunk(other, 1), chunk(blob, 2), chunk(blob, 3))},
		{"chunk from another tenant's blob", splice(hdr, chunk(blob, 0), chunk(globex, 1), chunk(blob, 2), chunk(blob, 3))},
		{"header of another blob", splice(other[:headerLen(other)], blob[hl:])},
		{"extended", splice(blob, chunk(blob, 3))},
		{"a byte appended", splice(blob, []byte{0})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := unsealBlob(tc.blob, "acme", key)
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrOtherTenant) {
				t.Fatalf("read %d bytes, err %v; want ErrCorrupt", len(got), err)
			}
			// What was returned is a prefix of the archive: no altered byte got through.
			if !bytes.HasPrefix(a, got) {
				t.Fatalf("returned %d bytes that are not the archive's", len(got))
			}
		})
	}
}

func TestBlobOtherTenant(t *testing.T) {
	key := newKey()
	blob := sealBlob(t, "acme", key, randomArchive("x", 100))
	r := bytes.NewReader(blob)
	h, err := ReadHeader(r)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewReader(r, h, "globex", key)
	if !errors.Is(err, ErrOtherTenant) || bytes.Contains([]byte(err.Error()), []byte("acme")) {
		t.Fatalf("NewReader as globex = %v; want ErrOtherTenant, not naming acme", err)
	}
	// A header rewritten to globex no longer matches its chunks.
	forged := bytes.Replace(blob, []byte(`"acme"`), []byte(`"globex"`), 1)
	forged[len(blobMagic)+2] += byte(len("globex") - len("acme"))
	if _, err := unsealBlob(forged, "globex", key); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("header rewritten to globex: %v; want ErrCorrupt", err)
	}
	if _, err := unsealBlob(blob, "acme", newKey()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("another key: %v; want ErrCorrupt", err)
	}
}

func TestWriterRefusesBadKeys(t *testing.T) {
	for _, tc := range []struct {
		name         string
		tenant       string
		key, wrapped []byte
	}{
		{"short key", "acme", make([]byte, 16), []byte("w")},
		{"no tenant", "", newKey(), []byte("w")},
		{"no wrapped key", "acme", newKey(), nil},
		{"wrapped key too long", "acme", newKey(), make([]byte, maxWrapped+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewWriter(io.Discard, tc.tenant, tc.key, tc.wrapped); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func BenchmarkSeal(b *testing.B) {
	key := newKey()
	a := randomArchive("bench", 4<<20)
	b.SetBytes(int64(len(a)))
	for b.Loop() {
		w, _ := NewWriter(io.Discard, "acme", key, []byte("vault:v1:x"))
		w.Write(a)
		w.Close()
	}
}

func BenchmarkOpen(b *testing.B) {
	key := newKey()
	a := randomArchive("bench", 4<<20)
	blob := sealBlob(b, "acme", key, a)
	b.SetBytes(int64(len(a)))
	for b.Loop() {
		if _, err := unsealBlob(blob, "acme", key); err != nil {
			b.Fatal(err)
		}
	}
}
