package snapshot

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// memStore is a Store in memory, whose calls a test may fail or count.
type memStore struct {
	mu      sync.Mutex
	objects map[string]memObject
	puts    map[string]int
	// failPut, when set, is asked before each Put; its error fails it.
	failPut func(key string) error
	now     func() time.Time
}

type memObject struct {
	data     []byte
	modified time.Time
}

var _ Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{objects: map[string]memObject{}, puts: map[string]int{}, now: time.Now}
}

func (s *memStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if s.failPut != nil {
		if err := s.failPut(key); err != nil {
			return err
		}
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && size == 0) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[key] = memObject{data: b, modified: s.now()}
	s.puts[key]++
	return nil
}

func (s *memStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(o.data)), nil
}

func (s *memStore) Stat(ctx context.Context, key string) (Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return Object{}, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return Object{Key: key, Size: int64(len(o.data)), Modified: o.modified}, nil
}

func (s *memStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, key)
	return nil
}

func (s *memStore) List(ctx context.Context, prefix string) ([]Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Object
	for k, o := range s.objects {
		if strings.HasPrefix(k, prefix) {
			out = append(out, Object{Key: k, Size: int64(len(o.data)), Modified: o.modified})
		}
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

func (s *memStore) String() string { return "memory store" }

// keys returns the store's keys, sorted.
func (s *memStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.objects))
	for k := range s.objects {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (s *memStore) bytes(key string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.objects[key].data)
}

func (s *memStore) set(key string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[key] = memObject{data: slices.Clone(b), modified: s.now()}
}

// localKeys is Keys without Vault, for tests of what is not Transit: each tenant's key is
// random and kept in memory, and a data key is wrapped with AES-GCM under it, bound to the
// tenant's name.
type localKeys struct {
	mu   sync.Mutex
	keys map[string][]byte
}

var _ Keys = (*localKeys)(nil)

func newLocalKeys() *localKeys { return &localKeys{keys: map[string][]byte{}} }

func (k *localKeys) aead(tenant string) cipher.AEAD {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := k.keys[tenant]
	if key == nil {
		key = make([]byte, 32)
		rand.Read(key)
		k.keys[tenant] = key
	}
	b, _ := aes.NewCipher(key)
	a, _ := cipher.NewGCM(b)
	return a
}

func (k *localKeys) DataKey(ctx context.Context, tenant string) (key, wrapped []byte, err error) {
	key = make([]byte, 32)
	rand.Read(key)
	n := make([]byte, 12)
	rand.Read(n)
	return key, append([]byte("vault:v1:"), k.aead(tenant).Seal(n, n, key, []byte(tenant))...), nil
}

func (k *localKeys) Unwrap(ctx context.Context, tenant string, wrapped []byte) ([]byte, error) {
	c, ok := bytes.CutPrefix(wrapped, []byte("vault:v1:"))
	if !ok || len(c) < 12 {
		return nil, errors.New("not a wrapped key")
	}
	return k.aead(tenant).Open(nil, c[:12], c[12:], []byte(tenant))
}

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testCatalog is a Catalog over a fresh memStore and localKeys, with a staging directory of its
// own that the test checks is empty at its end.
type testCatalog struct {
	*Catalog
	store   *memStore
	keys    Keys
	staging string
	clock   *fakeClock
	pruned  []Manifest
}

func newTestCatalog(t *testing.T, keys Keys, r Retention) *testCatalog {
	t.Helper()
	tc := &testCatalog{store: newMemStore(), keys: keys, staging: filepath.Join(t.TempDir(), "staging"), clock: newFakeClock()}
	if tc.keys == nil {
		tc.keys = newLocalKeys()
	}
	tc.store.now = tc.clock.Now
	c, err := NewCatalog(CatalogConfig{Store: tc.store, Keys: tc.keys, Staging: tc.staging, Retention: r,
		Now: tc.clock.Now, Pruned: func(m Manifest) { tc.pruned = append(tc.pruned, m) }})
	if err != nil {
		t.Fatal(err)
	}
	tc.Catalog = c
	t.Cleanup(func() { assertEmptyDir(t, tc.staging) })
	return tc
}

// save saves archive for tenant as a snapshot named name, failing the test on an error.
func (tc *testCatalog) save(t *testing.T, tenant, name string, archive []byte) Manifest {
	t.Helper()
	m, err := tc.Save(context.Background(), Meta{Tenant: tenant, Name: name, Template: "python"}, bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// open reads tenant's snapshot ref to its end.
func (tc *testCatalog) open(tenant, ref string) ([]byte, error) {
	_, rc, err := tc.Open(context.Background(), tenant, ref)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("staging directory %s holds %d files after the test, want none", dir, len(left))
	}
}

// idOf is the ID of archive a.
func idOf(a []byte) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256(a))
}
