package snapshot

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A blob is an archive encrypted for one tenant: a header, then the archive in chunks, each
// sealed with AES-256-GCM under the blob's own data key.
//
//	"ALSNAP" | version (1 byte, 1) | header length (2 bytes, big-endian) | header (JSON)
//	chunk 0 | chunk 1 | ... | last chunk
//
// The header holds the tenant, a random 16-byte blob id, the data key wrapped under the
// tenant's key, and the chunk size. Every chunk but the last holds ChunkSize bytes of archive
// (and the 16-byte tag); the last holds 0 to ChunkSize, and there is always one. A chunk's
// nonce is its index: safe because a data key seals one blob only (Save makes a fresh key for
// every blob). Its additional data binds the tenant, the blob id, the SHA-256 of the header's
// exact bytes (so the wrapped key and chunk size too), its index and whether it is the last,
// so a chunk altered, dropped, reordered, repeated or taken from another blob, another
// tenant's blob or another place, and a blob cut at a chunk boundary or extended, all fail to
// open. Nothing here is a secret but the data key, which is never written unwrapped.

// ChunkSize is the archive bytes each chunk of a blob holds (the last may hold fewer).
const ChunkSize = 64 << 10

const (
	blobMagic   = "ALSNAP"
	blobVersion = 1
	// maxHeader bounds a header's JSON: a tenant name, 32 hex digits, a wrapped key of well
	// under 1 KiB.
	maxHeader = 4 << 10
	// maxWrapped bounds a wrapped data key (Vault's "vault:v1:..." is about 90 bytes).
	maxWrapped = 1 << 10
	// minChunk and maxChunk bound the chunk size a reader accepts, and so what it buffers.
	minChunk, maxChunk = 1 << 10, 4 << 20
	// maxChunks bounds a blob's chunks (256 TiB at 64 KiB), far inside GCM's limits for
	// counter nonces under one key.
	maxChunks   = 1 << 32
	dataKeySize = 32
)

// Header is what precedes a blob's chunks.
type Header struct {
	// Tenant is the tenant the blob was sealed for.
	Tenant string
	// Blob is the blob's random id: no two blobs share one, so chunks cannot move between them.
	Blob [16]byte
	// Key is the data key wrapped under Tenant's key (Keys.DataKey).
	Key []byte
	// Chunk is the archive bytes each chunk holds.
	Chunk int
	// raw is the header's exact bytes, as written or read, which each chunk is bound to.
	raw []byte
}

type headerJSON struct {
	Tenant string `json:"tenant"`
	Blob   string `json:"blob"`
	Key    []byte `json:"key"`
	Chunk  int    `json:"chunk"`
}

// Writer seals an archive into a blob as it is written. Close seals the last chunk and must be
// called; the blob is cut short (and fails to open) without it. Not safe for concurrent use.
type Writer struct {
	dst     io.Writer
	aead    cipher.AEAD
	ad      []byte // the additional data's fixed part; index and last flag follow
	buf     []byte // archive bytes not sealed yet, up to a chunk
	out     []byte
	chunk   int
	index   uint64
	written int64
	err     error
}

// NewWriter writes the header of a blob for tenant, whose data key is key (32 bytes) and
// wrapped its wrapped form, to dst, and returns the Writer that seals what follows. key must
// never seal another blob.
func NewWriter(dst io.Writer, tenant string, key, wrapped []byte) (*Writer, error) {
	if len(key) != dataKeySize {
		return nil, fmt.Errorf("a snapshot data key is %d bytes, not %d", dataKeySize, len(key))
	}
	if tenant == "" {
		return nil, errors.New("a snapshot blob needs a tenant")
	}
	if len(wrapped) == 0 || len(wrapped) > maxWrapped {
		return nil, fmt.Errorf("a wrapped data key of %d bytes (want 1 to %d)", len(wrapped), maxWrapped)
	}
	h := Header{Tenant: tenant, Key: wrapped, Chunk: ChunkSize}
	if _, err := rand.Read(h.Blob[:]); err != nil {
		return nil, err
	}
	body, err := json.Marshal(headerJSON{Tenant: h.Tenant, Blob: hex.EncodeToString(h.Blob[:]), Key: h.Key, Chunk: h.Chunk})
	if err != nil {
		return nil, err
	}
	if len(body) > maxHeader {
		return nil, fmt.Errorf("a snapshot blob header of %d bytes (at most %d): tenant name too long", len(body), maxHeader)
	}
	h.raw = binary.BigEndian.AppendUint16(append([]byte(blobMagic), blobVersion), uint16(len(body)))
	h.raw = append(h.raw, body...)
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	w := &Writer{dst: dst, aead: aead, ad: h.additionalData(), chunk: h.Chunk,
		buf: make([]byte, 0, h.Chunk), out: make([]byte, 0, h.Chunk+aead.Overhead())}
	if err := w.emit(h.raw); err != nil {
		return nil, err
	}
	return w, nil
}

// Write buffers p and seals each chunk once it is full and more follows.
func (w *Writer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.err != nil {
			return n, w.err
		}
		if len(w.buf) == w.chunk {
			// Sealed only now: until more came, this chunk could have been the last.
			w.seal(false)
			continue
		}
		k := copy(w.buf[len(w.buf):w.chunk], p)
		w.buf = w.buf[:len(w.buf)+k]
		p, n = p[k:], n+k
	}
	return n, w.err
}

// Close seals the last chunk. It does not close the destination.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	w.seal(true)
	if w.err == nil {
		w.err = errors.New("snapshot blob writer: closed")
		return nil
	}
	return w.err
}

// Written is the blob's size so far: the header and the chunks sealed.
func (w *Writer) Written() int64 { return w.written }

func (w *Writer) seal(last bool) {
	if w.index >= maxChunks {
		w.err = fmt.Errorf("a snapshot blob of more than %d chunks", uint64(maxChunks))
		return
	}
	w.out = w.aead.Seal(w.out[:0], nonce(w.index), w.buf, chunkAD(w.ad, w.index, last))
	w.buf = w.buf[:0]
	w.index++
	w.err = w.emit(w.out)
}

func (w *Writer) emit(p []byte) error {
	n, err := w.dst.Write(p)
	w.written += int64(n)
	return err
}

// ReadHeader reads a blob's header from r, leaving r at its first chunk. Its errors wrap
// ErrCorrupt, but for r's own.
func ReadHeader(r io.Reader) (Header, error) {
	var fixed [len(blobMagic) + 3]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return Header{}, shortRead("its header", err)
	}
	if string(fixed[:len(blobMagic)]) != blobMagic {
		return Header{}, fmt.Errorf("%w: not a snapshot blob (it does not begin with %q)", ErrCorrupt, blobMagic)
	}
	if v := fixed[len(blobMagic)]; v != blobVersion {
		return Header{}, fmt.Errorf("%w: a snapshot blob of version %d; this airlock reads version %d", ErrCorrupt, v, blobVersion)
	}
	n := int(binary.BigEndian.Uint16(fixed[len(blobMagic)+1:]))
	if n > maxHeader {
		return Header{}, fmt.Errorf("%w: a snapshot blob header of %d bytes (at most %d)", ErrCorrupt, n, maxHeader)
	}
	raw := make([]byte, len(fixed)+n)
	copy(raw, fixed[:])
	if _, err := io.ReadFull(r, raw[len(fixed):]); err != nil {
		return Header{}, shortRead("its header", err)
	}
	var hj headerJSON
	dec := json.NewDecoder(bytes.NewReader(raw[len(fixed):]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hj); err != nil {
		return Header{}, fmt.Errorf("%w: a snapshot blob header that does not decode: %v", ErrCorrupt, err)
	}
	h := Header{Tenant: hj.Tenant, Key: hj.Key, Chunk: hj.Chunk, raw: raw}
	id, err := hex.DecodeString(hj.Blob)
	switch {
	case err != nil || len(id) != len(h.Blob):
		return Header{}, fmt.Errorf("%w: a snapshot blob header whose blob id is not 32 hex digits", ErrCorrupt)
	case h.Tenant == "":
		return Header{}, fmt.Errorf("%w: a snapshot blob header that names no tenant", ErrCorrupt)
	case len(h.Key) == 0 || len(h.Key) > maxWrapped:
		return Header{}, fmt.Errorf("%w: a snapshot blob header with a wrapped key of %d bytes (want 1 to %d)", ErrCorrupt, len(h.Key), maxWrapped)
	case h.Chunk < minChunk || h.Chunk > maxChunk:
		return Header{}, fmt.Errorf("%w: a snapshot blob header with chunks of %d bytes (want %d to %d)", ErrCorrupt, h.Chunk, minChunk, maxChunk)
	}
	copy(h.Blob[:], id)
	return h, nil
}

// Reader opens a blob's chunks as they are read: it returns the archive, and an error wrapping
// ErrCorrupt, never altered bytes, when a chunk does not authenticate or the blob is cut
// short. Bytes of a chunk are returned only once the whole chunk has been opened. Not safe for
// concurrent use.
type Reader struct {
	src    io.Reader
	h      Header
	aead   cipher.AEAD
	ad     []byte
	in     []byte // ciphertext read ahead: a chunk and one byte past it tell a last chunk apart
	opened []byte // the chunk last opened
	plain  []byte // what of it is not yet returned
	index  uint64
	eof    bool // src is at its end
	done   bool // the last chunk is opened
	err    error
}

// NewReader returns the Reader of the chunks that follow h in src (where ReadHeader left
// it), opened with key, h's data key unwrapped for tenant. A blob of another tenant is refused
// with ErrOtherTenant, without saying which.
func NewReader(src io.Reader, h Header, tenant string, key []byte) (*Reader, error) {
	if h.Tenant != tenant {
		return nil, fmt.Errorf("%w: blob %x is sealed for another tenant", ErrOtherTenant, h.Blob)
	}
	if h.raw == nil {
		return nil, errors.New("snapshot.NewReader: a header not read by ReadHeader")
	}
	if len(key) != dataKeySize {
		return nil, fmt.Errorf("a snapshot data key is %d bytes, not %d", dataKeySize, len(key))
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	return &Reader{src: src, h: h, aead: aead, ad: h.additionalData(),
		in: make([]byte, 0, h.Chunk+aead.Overhead()+1), opened: make([]byte, 0, h.Chunk)}, nil
}

// Read returns the archive's next bytes; io.EOF once the last chunk is read.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.plain) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.done {
			return 0, io.EOF
		}
		r.err = r.next()
	}
	n := copy(p, r.plain)
	r.plain = r.plain[n:]
	return n, nil
}

// next opens the next chunk into r.plain.
func (r *Reader) next() error {
	sealed := r.h.Chunk + r.aead.Overhead()
	for !r.eof && len(r.in) < sealed+1 {
		n, err := r.src.Read(r.in[len(r.in) : sealed+1])
		r.in = r.in[:len(r.in)+n]
		if err == io.EOF {
			r.eof = true
		} else if err != nil {
			return fmt.Errorf("reading blob %x at chunk %d: %w", r.h.Blob, r.index, err)
		}
	}
	last := len(r.in) <= sealed
	c := r.in
	if !last {
		c = r.in[:sealed]
	}
	if len(c) == 0 {
		return fmt.Errorf("%w: blob %x ends after %d chunks without its last: it was cut short", ErrCorrupt, r.h.Blob, r.index)
	}
	if r.index >= maxChunks {
		return fmt.Errorf("%w: blob %x has more than %d chunks", ErrCorrupt, r.h.Blob, uint64(maxChunks))
	}
	plain, err := r.aead.Open(r.opened[:0], nonce(r.index), c, chunkAD(r.ad, r.index, last))
	if err != nil {
		return fmt.Errorf("%w: blob %x: chunk %d does not authenticate (altered, moved, cut short, or taken from another blob)", ErrCorrupt, r.h.Blob, r.index)
	}
	r.plain = plain
	r.index++
	r.done = last
	// The byte read ahead, if any, begins the next chunk.
	r.in = r.in[:copy(r.in, r.in[len(c):])]
	return nil
}

// additionalData is the part of every chunk's additional data that is the same for the blob:
// the tenant (length-prefixed), the blob id, and the SHA-256 of the header's bytes.
func (h Header) additionalData() []byte {
	sum := sha256.Sum256(h.raw)
	ad := binary.BigEndian.AppendUint16(nil, uint16(len(h.Tenant)))
	ad = append(ad, h.Tenant...)
	ad = append(ad, h.Blob[:]...)
	ad = append(ad, sum[:]...)
	return append(ad, make([]byte, 9)...)
}

// chunkAD fills in a chunk's index and last flag at the end of ad, in place.
func chunkAD(ad []byte, index uint64, last bool) []byte {
	tail := ad[len(ad)-9:]
	binary.BigEndian.PutUint64(tail, index)
	tail[8] = 0
	if last {
		tail[8] = 1
	}
	return ad
}

func nonce(index uint64) []byte {
	n := make([]byte, 12)
	binary.BigEndian.PutUint64(n[4:], index)
	return n
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// shortRead names a read that ended early as a blob cut short.
func shortRead(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: the blob ends within %s: it was cut short", ErrCorrupt, what)
	}
	return fmt.Errorf("reading a snapshot blob's header: %w", err)
}
