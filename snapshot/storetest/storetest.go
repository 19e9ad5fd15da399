package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/snapshot"
)

// Run runs the conformance tests, each in a subtest on an empty store of its own that newStore
// returns (a fresh directory, or a fresh prefix in a shared bucket).
func Run(t *testing.T, newStore func() snapshot.Store) {
	for _, tc := range []struct {
		name string
		test func(*testing.T, snapshot.Store)
	}{
		{"RoundTrip", roundTrip},
		{"PutReplaces", putReplaces},
		{"Missing", missing},
		{"Stat", stat},
		{"DeleteIsIdempotent", deleteIsIdempotent},
		{"List", list},
		{"BadKeysAreRefused", badKeysAreRefused},
		{"FailedPutLeavesNothing", failedPutLeavesNothing},
		{"FailedPutKeepsTheOldObject", failedPutKeepsTheOldObject},
		{"ShortReaderIsRefused", shortReaderIsRefused},
		{"CancelledPut", cancelledPut},
		{"ConcurrentPuts", concurrentPuts},
		{"String", str},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, newStore())
		})
	}
}

// Bytes returns n bytes of a pseudo-random stream seeded by seed: the same for the same
// arguments, different for different seeds, and not compressible.
func Bytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// FailingReader is a ReaderAt of Data that fails every read reaching past After bytes with
// Err (errBroken when nil), as a source that breaks part way does.
type FailingReader struct {
	Data  []byte
	After int64
	Err   error
}

// errBroken is what a FailingReader fails with when given no Err.
var errBroken = errors.New("the source broke")

// ReadAt implements io.ReaderAt.
func (r *FailingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.After {
		n := 0
		if off < r.After {
			n = copy(p, r.Data[off:r.After])
		}
		if r.Err != nil {
			return n, r.Err
		}
		return n, errBroken
	}
	return copy(p, r.Data[off:]), nil
}

// Put puts data under key, failing t if it cannot.
func Put(t testing.TB, s snapshot.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// Get returns what s holds under key, failing t if it cannot.
func Get(t testing.TB, s snapshot.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return b
}

// Keys lists the keys under prefix, failing t if it cannot.
func Keys(t testing.TB, s snapshot.Store, prefix string) []string {
	t.Helper()
	objs, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}

func roundTrip(t *testing.T, s snapshot.Store) {
	for i, n := range []int{0, 1, 4096, 1<<20 + 3} {
		key := fmt.Sprintf("tenants/acme/blobs/size-%d", n)
		want := Bytes(uint64(i), n)
		Put(t, s, key, want)
		if got := Get(t, s, key); !bytes.Equal(got, want) {
			t.Errorf("%s: got %d bytes back, not the %d put", key, len(got), len(want))
		}
	}
}

func putReplaces(t *testing.T, s snapshot.Store) {
	Put(t, s, "a/b", []byte("first, and longer than the second"))
	Put(t, s, "a/b", []byte("second"))
	if got := Get(t, s, "a/b"); string(got) != "second" {
		t.Fatalf("after a second put: %q", got)
	}
}

func missing(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	Put(t, s, "a/present", []byte("x"))
	for _, key := range []string{"a/absent", "absent", "a/present/below"} {
		if _, err := s.Get(ctx, key); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("get %s: %v, want ErrNotFound", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("stat %s: %v, want ErrNotFound", key, err)
		}
	}
	// "a" is no object, though "a/present" is.
	if _, err := s.Stat(ctx, "a"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("stat a: %v, want ErrNotFound", err)
	}
}

func stat(t *testing.T, s snapshot.Store) {
	before := time.Now().Add(-time.Minute) // servers keep times to the second, on clocks of their own
	Put(t, s, "t/x", Bytes(7, 12345))
	o, err := s.Stat(context.Background(), "t/x")
	if err != nil {
		t.Fatal(err)
	}
	if o.Key != "t/x" || o.Size != 12345 {
		t.Errorf("stat: %+v, want key t/x and size 12345", o)
	}
	if o.Modified.Before(before) || o.Modified.After(time.Now().Add(time.Minute)) {
		t.Errorf("stat: modified %v, not about now", o.Modified)
	}
}

func deleteIsIdempotent(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("deleting what was never there: %v", err)
	}
	Put(t, s, "d/x", []byte("x"))
	Put(t, s, "d/y", []byte("y"))
	for range 2 {
		if err := s.Delete(ctx, "d/x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Stat(ctx, "d/x"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("stat after delete: %v", err)
	}
	if got := Keys(t, s, ""); !slices.Equal(got, []string{"d/y"}) {
		t.Fatalf("after deleting d/x: %q", got)
	}
}

func list(t *testing.T, s snapshot.Store) {
	all := []string{"a-b/1", "a/b/1", "a/b/2", "a/bx/1", "a/c/1", "ab/x", "z"}
	for _, k := range slices.Backward(all) { // not in order, so the order is List's
		Put(t, s, k, []byte(k))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", all},
		{"a/", []string{"a/b/1", "a/b/2", "a/bx/1", "a/c/1"}},
		{"a/b/", []string{"a/b/1", "a/b/2"}},
		{"a/b", []string{"a/b/1", "a/b/2", "a/bx/1"}},
		{"a", []string{"a-b/1", "a/b/1", "a/b/2", "a/bx/1", "a/c/1", "ab/x"}},
		{"a/b/1", []string{"a/b/1"}},
		{"z", []string{"z"}},
		{"nothing/", nil},
		{"a/b/1/", nil},
	} {
		got := Keys(t, s, tc.prefix)
		if !slices.Equal(got, tc.want) {
			t.Errorf("list %q: %q, want %q", tc.prefix, got, tc.want)
		}
	}
	objs, err := s.List(context.Background(), "a/b/1")
	if err != nil || len(objs) != 1 || objs[0].Size != int64(len("a/b/1")) || objs[0].Modified.IsZero() {
		t.Errorf("list a/b/1: %+v, %v; want its size and time", objs, err)
	}
	for _, bad := range []string{"/", "../", "a//", "A", "a/../"} {
		if _, err := s.List(context.Background(), bad); err == nil {
			t.Errorf("list %q: no error", bad)
		}
	}
}

func badKeysAreRefused(t *testing.T, s snapshot.Store) {
	ctx := context.Background()
	for _, key := range []string{
		"", "/", "/a", "a/", "a//b", ".", "..", "../x", "a/../b", "a/./b", "A", "a/B",
		"a b", `a\b`, "a\x00b", "a%2fb", "é", "a?b", "a#b",
	} {
		if err := s.Put(ctx, key, bytes.NewReader([]byte("x")), 1); err == nil {
			t.Errorf("put %q: no error", key)
		}
		if _, err := s.Get(ctx, key); err == nil || errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("get %q: %v, want a refusal", key, err)
		}
		if _, err := s.Stat(ctx, key); err == nil || errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("stat %q: %v, want a refusal", key, err)
		}
		if err := s.Delete(ctx, key); err == nil {
			t.Errorf("delete %q: no error", key)
		}
	}
	if got := Keys(t, s, ""); len(got) != 0 {
		t.Fatalf("refused keys stored something: %q", got)
	}
}

func failedPutLeavesNothing(t *testing.T, s snapshot.Store) {
	data := Bytes(1, 3<<20)
	err := s.Put(context.Background(), "f/x", &FailingReader{Data: data, After: 2 << 20}, int64(len(data)))
	if !errors.Is(err, errBroken) {
		t.Fatalf("put from a reader that broke: %v, want its error", err)
	}
	if _, err := s.Stat(context.Background(), "f/x"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("stat after a failed put: %v, want ErrNotFound", err)
	}
	if got := Keys(t, s, ""); len(got) != 0 {
		t.Fatalf("a failed put left %q", got)
	}
}

func failedPutKeepsTheOldObject(t *testing.T, s snapshot.Store) {
	old := Bytes(2, 1<<20)
	Put(t, s, "f/x", old)
	data := Bytes(3, 3<<20)
	if err := s.Put(context.Background(), "f/x", &FailingReader{Data: data, After: 2 << 20}, int64(len(data))); err == nil {
		t.Fatal("put from a reader that broke: no error")
	}
	if got := Get(t, s, "f/x"); !bytes.Equal(got, old) {
		t.Fatalf("after a failed put: %d bytes, not the old object's %d", len(got), len(old))
	}
}

func shortReaderIsRefused(t *testing.T, s snapshot.Store) {
	data := Bytes(4, 1000)
	if err := s.Put(context.Background(), "s/x", bytes.NewReader(data), 1001); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("put of 1001 bytes from a reader of 1000: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := s.Stat(context.Background(), "s/x"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("stat after a short put: %v, want ErrNotFound", err)
	}
}

func cancelledPut(t *testing.T, s snapshot.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	data := Bytes(5, 2<<20)
	if err := s.Put(ctx, "c/x", bytes.NewReader(data), int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Fatalf("put with an ended context: %v, want context.Canceled", err)
	}
	if _, err := s.Stat(context.Background(), "c/x"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("stat after a cancelled put: %v, want ErrNotFound", err)
	}
}

// concurrentPuts puts eight objects at once, four of them to one key: each key ends whole,
// holding one of the versions put.
func concurrentPuts(t *testing.T, s snapshot.Store) {
	versions := make([][]byte, 4)
	for i := range versions {
		versions[i] = Bytes(uint64(100+i), 256<<10)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 4 {
		wg.Go(func() {
			errs <- s.Put(context.Background(), "k/shared", bytes.NewReader(versions[i]), int64(len(versions[i])))
		})
		wg.Go(func() {
			data := Bytes(uint64(200+i), 64<<10)
			errs <- s.Put(context.Background(), fmt.Sprintf("k/own-%d", i), bytes.NewReader(data), int64(len(data)))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := Get(t, s, "k/shared")
	if !slices.ContainsFunc(versions, func(v []byte) bool { return bytes.Equal(v, got) }) {
		t.Fatalf("k/shared holds %d bytes that are none of the versions put", len(got))
	}
	for i := range 4 {
		if got := Get(t, s, fmt.Sprintf("k/own-%d", i)); !bytes.Equal(got, Bytes(uint64(200+i), 64<<10)) {
			t.Fatalf("k/own-%d does not hold what was put", i)
		}
	}
	if got := Keys(t, s, "k/"); len(got) != 5 {
		t.Fatalf("list k/: %q, want 5 keys", got)
	}
}

func str(t *testing.T, s snapshot.Store) {
	if s.String() == "" {
		t.Fatal("String is empty")
	}
}
