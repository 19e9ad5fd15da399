package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/snapshot"
	"github.com/airlock-dev/airlock/snapshot/storetest"
)

// One SeaweedFS server for the test binary, started by the first test that needs it; each test
// has a prefix of its own in its bucket.
var (
	weedOnce sync.Once
	weed     *devstack.S3Server
	weedErr  error
	weedStop context.CancelFunc
	weedDir  string
	prefixes atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if weed != nil {
		weedStop()
		weed.Stop()
		os.RemoveAll(weedDir)
	}
	os.Exit(code)
}

// seaweed returns the test binary's SeaweedFS server, starting it the first time, from bin/weed
// (built by `make seaweedfs`).
func seaweed(t *testing.T) *devstack.S3Server {
	t.Helper()
	bin, _ := filepath.Abs("../bin/weed")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run the tests with `make test`, or build it with `make seaweedfs`", bin)
	}
	weedOnce.Do(func() {
		weedDir, weedErr = os.MkdirTemp("", "airlock-weed-")
		if weedErr != nil {
			return
		}
		var ctx context.Context
		ctx, weedStop = context.WithCancel(context.Background())
		weed, weedErr = devstack.StartS3(ctx, weedDir, bin)
		if weedErr != nil {
			weedStop() // its folder stays, with the log the error quotes
		}
	})
	if weedErr != nil {
		t.Fatal(weedErr)
	}
	return weed
}

// newS3 returns a store under a fresh prefix of the server's bucket, and the prefix, with
// PartSize at its least (so a 13 MiB object is three parts), changed by edit if it is not nil.
func newS3(t *testing.T, edit func(*snapshot.S3Config)) (*snapshot.S3, string) {
	t.Helper()
	prefix := fmt.Sprintf("test-%d/", prefixes.Add(1))
	cfg := seaweed(t).StoreConfig(prefix)
	cfg.PartSize = snapshot.MinPartSize
	if edit != nil {
		edit(&cfg)
	}
	s, err := snapshot.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, prefix
}

func TestS3Conformance(t *testing.T) {
	storetest.Run(t, func() snapshot.Store { s, _ := newS3(t, nil); return s })
}

// calls counts an S3 store's requests by kind, and fails those that fail says to.
type calls struct {
	mu        sync.Mutex
	creates   int         // NewMultipartUpload
	parts     map[int]int // attempts of PutObjectPart, by part number
	completes int
	puts      int // PutObject of a whole object
	aborts    int
	// fail, when not nil, answers a request instead of the server when it returns a response
	// or an error (it is called with the attempt's number for parts, else 0).
	fail func(r *http.Request, part, attempt int) (*http.Response, error)
}

func (c *calls) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	part, attempt := 0, 0
	c.mu.Lock()
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		c.creates++
	case r.Method == http.MethodPut && q.Has("partNumber"):
		fmt.Sscan(q.Get("partNumber"), &part)
		if c.parts == nil {
			c.parts = map[int]int{}
		}
		c.parts[part]++
		attempt = c.parts[part]
	case r.Method == http.MethodPost && q.Has("uploadId"):
		c.completes++
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		c.aborts++
	case r.Method == http.MethodPut:
		c.puts++
	}
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		if resp, err := fail(r, part, attempt); resp != nil || err != nil {
			if r.Body != nil {
				r.Body.Close()
			}
			return resp, err
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (c *calls) partsSent() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sent []int
	for p, n := range c.parts {
		for range n {
			sent = append(sent, p)
		}
	}
	slices.Sort(sent)
	return sent
}

// reset forgets the requests counted so far, and stops failing any.
func (c *calls) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.creates, c.parts, c.completes, c.puts, c.aborts, c.fail = 0, nil, 0, 0, 0, nil
}

// unfinished lists the unfinished multipart uploads of key in the store under prefix, asking
// the server directly.
func unfinished(t *testing.T, prefix, key string) []minio.ObjectMultipartInfo {
	t.Helper()
	w := seaweed(t)
	c, err := minio.NewCore(strings.TrimPrefix(w.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(w.AccessKey, w.SecretKey, ""), Region: "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.ListMultipartUploads(context.Background(), w.Bucket, prefix+key, "", "", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return res.Uploads
}

const mib = 1 << 20

// An object over the part size goes up in parts and comes back byte for byte; one of exactly
// the part size goes up in one request.
func TestS3Multipart(t *testing.T) {
	c := &calls{}
	s, prefix := newS3(t, func(cfg *snapshot.S3Config) { cfg.Transport = c })
	data := storetest.Bytes(1, 2*snapshot.MinPartSize+3)
	storetest.Put(t, s, "big", data)
	if got := storetest.Get(t, s, "big"); !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes back, not the %d put (or not the same ones)", len(got), len(data))
	}
	if got := c.partsSent(); fmt.Sprint(got) != "[1 2 3]" || c.creates != 1 || c.completes != 1 || c.puts != 0 {
		t.Fatalf("parts sent %v, %d creates, %d completes, %d whole puts; want parts 1 2 3 of one upload", got, c.creates, c.completes, c.puts)
	}
	if o, err := s.Stat(context.Background(), "big"); err != nil || o.Size != int64(len(data)) {
		t.Fatalf("stat: %+v, %v", o, err)
	}
	if u := unfinished(t, prefix, "big"); len(u) != 0 {
		t.Fatalf("unfinished uploads left: %+v", u)
	}

	exact := storetest.Bytes(2, snapshot.MinPartSize)
	storetest.Put(t, s, "exact", exact)
	if c.puts != 1 || c.creates != 1 {
		t.Fatalf("an object of the part size: %d whole puts, %d multipart uploads; want one whole put", c.puts, c.creates)
	}
	if got := storetest.Get(t, s, "exact"); !bytes.Equal(got, exact) {
		t.Fatal("the object of the part size did not come back as put")
	}
}

// A Put whose source breaks part way keeps the parts it stored, and the next Put of the key
// resumes the upload: it sends only the missing parts.
func TestS3ResumesAnInterruptedPut(t *testing.T) {
	c := &calls{}
	s, prefix := newS3(t, func(cfg *snapshot.S3Config) { cfg.Transport = c })
	data := storetest.Bytes(3, 13*mib) // parts of 5, 5 and 3 MiB
	err := s.Put(context.Background(), "obj", &storetest.FailingReader{Data: data, After: 7 * mib}, int64(len(data)))
	if err == nil || errors.Is(err, snapshot.ErrStoreDown) {
		t.Fatalf("put from a source that broke in part 2: %v, want the source's error", err)
	}
	if _, err := s.Stat(context.Background(), "obj"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("stat after the interrupted put: %v, want ErrNotFound", err)
	}
	if u := unfinished(t, prefix, "obj"); len(u) != 1 {
		t.Fatalf("after the interrupted put, %d unfinished uploads, want 1 (kept to resume)", len(u))
	}
	if got := c.partsSent(); fmt.Sprint(got) != "[1]" {
		t.Fatalf("the interrupted put sent parts %v, want [1]", got)
	}

	c.reset()
	storetest.Put(t, s, "obj", data)
	if got := c.partsSent(); fmt.Sprint(got) != "[2 3]" || c.creates != 0 || c.completes != 1 {
		t.Fatalf("the resumed put sent parts %v, began %d uploads, completed %d; want parts 2 3 of the upload already begun", got, c.creates, c.completes)
	}
	if got := storetest.Get(t, s, "obj"); !bytes.Equal(got, data) {
		t.Fatal("the resumed object is not the bytes put")
	}
	if u := unfinished(t, prefix, "obj"); len(u) != 0 {
		t.Fatalf("unfinished uploads left: %+v", u)
	}
}

// A resumed upload keeps a stored part only if it holds the same bytes: when the source
// changed between the two Puts, every part is sent again.
func TestS3ResumeChecksStoredParts(t *testing.T) {
	c := &calls{}
	s, _ := newS3(t, func(cfg *snapshot.S3Config) { cfg.Transport = c })
	first := storetest.Bytes(4, 13*mib)
	if err := s.Put(context.Background(), "obj", &storetest.FailingReader{Data: first, After: 7 * mib}, int64(len(first))); err == nil {
		t.Fatal("put from a source that broke: no error")
	}
	c.reset()
	second := storetest.Bytes(5, 13*mib)
	storetest.Put(t, s, "obj", second)
	if got := c.partsSent(); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("a put of other bytes over an unfinished upload sent parts %v, want all three", got)
	}
	if got := storetest.Get(t, s, "obj"); !bytes.Equal(got, second) {
		t.Fatal("the object is not the second put's bytes")
	}
}

// A part whose request fails is sent again, and the Put succeeds.
func TestS3RetriesAPart(t *testing.T) {
	c := &calls{fail: func(r *http.Request, part, attempt int) (*http.Response, error) {
		if part == 2 && attempt == 1 {
			return nil, &net.OpError{Op: "write", Net: "tcp", Err: errors.New("connection reset by peer")}
		}
		return nil, nil
	}}
	s, _ := newS3(t, func(cfg *snapshot.S3Config) { cfg.Transport = c })
	data := storetest.Bytes(6, 13*mib)
	storetest.Put(t, s, "obj", data)
	if got := c.partsSent(); fmt.Sprint(got) != "[1 2 2 3]" {
		t.Fatalf("parts sent %v, want part 2 twice", got)
	}
	if got := storetest.Get(t, s, "obj"); !bytes.Equal(got, data) {
		t.Fatal("the object is not the bytes put")
	}
}

// A part that cannot be sent is tried a bounded number of times; the Put then fails with
// ErrStoreDown and keeps the upload, which the next Put resumes.
func TestS3GivesUpOnAPartAndResumes(t *testing.T) {
	c := &calls{fail: func(r *http.Request, part, attempt int) (*http.Response, error) {
		if part == 2 {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
		}
		return nil, nil
	}}
	s, prefix := newS3(t, func(cfg *snapshot.S3Config) { cfg.Transport = c })
	data := storetest.Bytes(7, 13*mib)
	err := s.Put(context.Background(), "obj", bytes.NewReader(data), int64(len(data)))
	if !errors.Is(err, snapshot.ErrStoreDown) {
		t.Fatalf("put whose part 2 never goes through: %v, want ErrStoreDown", err)
	}
	if got := c.partsSent(); fmt.Sprint(got) != "[1 2 2 2 2]" || c.aborts != 0 {
		t.Fatalf("parts sent %v, %d aborts; want part 2 four times and no abort", got, c.aborts)
	}
	if u := unfinished(t, prefix, "obj"); len(u) != 1 {
		t.Fatalf("%d unfinished uploads, want the one kept to resume", len(u))
	}
	c.reset()
	storetest.Put(t, s, "obj", data)
	if got := c.partsSent(); fmt.Sprint(got) != "[2 3]" {
		t.Fatalf("the resumed put sent parts %v, want 2 3", got)
	}
	if got := storetest.Get(t, s, "obj"); !bytes.Equal(got, data) {
		t.Fatal("the object is not the bytes put")
	}
}

// A Put whose context ends part way keeps its upload, and the next Put resumes it.
func TestS3CancelledPutResumes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &calls{fail: func(r *http.Request, part, attempt int) (*http.Response, error) {
		if part == 2 {
			cancel() // as a caller giving up while part 2 is on its way
			return nil, context.Canceled
		}
		return nil, nil
	}}
	s, prefix := newS3(t, func(cfg *snapshot.S3Config) { cfg.Transport = c })
	data := storetest.Bytes(11, 13*mib)
	if err := s.Put(ctx, "obj", bytes.NewReader(data), int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Fatalf("put whose context ended: %v, want context.Canceled", err)
	}
	if got := c.partsSent(); fmt.Sprint(got) != "[1 2]" || c.aborts != 0 {
		t.Fatalf("parts sent %v, %d aborts; want part 2 once (an ended context is not retried) and no abort", got, c.aborts)
	}
	if u := unfinished(t, prefix, "obj"); len(u) != 1 {
		t.Fatalf("%d unfinished uploads, want the one kept to resume", len(u))
	}
	c.reset()
	storetest.Put(t, s, "obj", data)
	if got := c.partsSent(); fmt.Sprint(got) != "[2 3]" {
		t.Fatalf("the resumed put sent parts %v, want 2 3", got)
	}
	if got := storetest.Get(t, s, "obj"); !bytes.Equal(got, data) {
		t.Fatal("the object is not the bytes put")
	}
}

// When the server refuses a part outright, giving up is final: the upload is aborted, so
// nothing of it stays stored.
func TestS3AbortsARefusedUpload(t *testing.T) {
	c := &calls{fail: func(r *http.Request, part, attempt int) (*http.Response, error) {
		if part != 2 {
			return nil, nil
		}
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>`
		return &http.Response{
			StatusCode: http.StatusForbidden, Status: "403 Forbidden", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: r,
		}, nil
	}}
	s, prefix := newS3(t, func(cfg *snapshot.S3Config) { cfg.Transport = c })
	data := storetest.Bytes(8, 13*mib)
	err := s.Put(context.Background(), "obj", bytes.NewReader(data), int64(len(data)))
	if err == nil || errors.Is(err, snapshot.ErrStoreDown) || !strings.Contains(err.Error(), "Access Denied") {
		t.Fatalf("put refused by the server: %v, want its refusal", err)
	}
	if got := c.partsSent(); fmt.Sprint(got) != "[1 2]" || c.aborts != 1 {
		t.Fatalf("parts sent %v, %d aborts; want part 2 once (a refusal is not retried), then the abort", got, c.aborts)
	}
	if u := unfinished(t, prefix, "obj"); len(u) != 0 {
		t.Fatalf("a refused upload was kept: %+v", u)
	}
}

// Deleting a key also aborts its unfinished upload.
func TestS3DeleteAbortsUnfinishedUploads(t *testing.T) {
	s, prefix := newS3(t, nil)
	data := storetest.Bytes(9, 13*mib)
	if err := s.Put(context.Background(), "obj", &storetest.FailingReader{Data: data, After: 7 * mib}, int64(len(data))); err == nil {
		t.Fatal("put from a source that broke: no error")
	}
	if err := s.Delete(context.Background(), "obj"); err != nil {
		t.Fatal(err)
	}
	if u := unfinished(t, prefix, "obj"); len(u) != 0 {
		t.Fatalf("delete left unfinished uploads: %+v", u)
	}
}

// A store whose endpoint refuses connections fails every call quickly, with an error that
// wraps ErrStoreDown and names the endpoint and the bucket, and never a credential.
func TestS3StoreDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	const access, secret = "AKDOWNTEST", "the-secret-key-of-the-down-test"
	s, err := snapshot.NewS3(snapshot.S3Config{
		Endpoint: "http://" + addr, Bucket: "snaps", AccessKey: access, SecretKey: secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := storetest.Bytes(10, 9*mib) // over the default part size: a multipart upload
	for name, call := range map[string]func() error{
		"put":       func() error { return s.Put(ctx, "a/b", bytes.NewReader([]byte("x")), 1) },
		"put parts": func() error { return s.Put(ctx, "a/b", bytes.NewReader(big), int64(len(big))) },
		"get":       func() error { _, err := s.Get(ctx, "a/b"); return err },
		"stat":      func() error { _, err := s.Stat(ctx, "a/b"); return err },
		"list":      func() error { _, err := s.List(ctx, "a/"); return err },
		"delete":    func() error { return s.Delete(ctx, "a/b") },
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := call()
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s to fail", took)
			}
			if !errors.Is(err, snapshot.ErrStoreDown) {
				t.Fatalf("%v, want ErrStoreDown", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "http://"+addr) || !strings.Contains(msg, "bucket snaps") {
				t.Errorf("%q does not name the endpoint and the bucket", msg)
			}
			if strings.Contains(msg, access) || strings.Contains(msg, secret) {
				t.Errorf("%q shows a credential", msg)
			}
		})
	}
}

// A request the server refuses for its signature fails without ErrStoreDown, and its error
// shows neither key.
func TestS3WrongSecret(t *testing.T) {
	s, _ := newS3(t, func(cfg *snapshot.S3Config) { cfg.SecretKey = "not-" + cfg.SecretKey })
	err := s.Put(context.Background(), "a", bytes.NewReader([]byte("x")), 1)
	if err == nil || errors.Is(err, snapshot.ErrStoreDown) {
		t.Fatalf("put with a wrong secret: %v, want a refusal", err)
	}
	w := seaweed(t)
	if msg := err.Error(); strings.Contains(msg, w.AccessKey) || strings.Contains(msg, w.SecretKey) {
		t.Fatalf("%q shows a credential", msg)
	}
}

// A bucket that does not exist is a store that is not there.
func TestS3NoSuchBucket(t *testing.T) {
	s, _ := newS3(t, func(cfg *snapshot.S3Config) { cfg.Bucket = "no-such-bucket" })
	if _, err := s.Stat(context.Background(), "a"); !errors.Is(err, snapshot.ErrStoreDown) {
		t.Fatalf("stat in a bucket that does not exist: %v, want ErrStoreDown", err)
	}
}

// Objects of one prefix are not seen by a store of another in the same bucket.
func TestS3PrefixesAreApart(t *testing.T) {
	a, _ := newS3(t, nil)
	b, _ := newS3(t, nil)
	storetest.Put(t, a, "x/1", []byte("a's"))
	if got := storetest.Keys(t, b, ""); len(got) != 0 {
		t.Fatalf("b lists a's objects: %q", got)
	}
	if _, err := b.Stat(context.Background(), "x/1"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("b stats a's object: %v", err)
	}
}

func TestS3String(t *testing.T) {
	s, prefix := newS3(t, nil)
	w := seaweed(t)
	want := fmt.Sprintf("s3 bucket %s at %s under %s", w.Bucket, w.Endpoint, prefix)
	if got := s.String(); got != want {
		t.Fatalf("String: %q, want %q", got, want)
	}
}

func TestS3ConfigValidate(t *testing.T) {
	good := snapshot.S3Config{Endpoint: "https://s3.example.test", Bucket: "snaps", AccessKey: "a", SecretKey: "s"}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*snapshot.S3Config)
		want string
	}{
		{"no endpoint", func(c *snapshot.S3Config) { c.Endpoint = "" }, "endpoint: must be set"},
		{"ftp", func(c *snapshot.S3Config) { c.Endpoint = "ftp://s3.example.test" }, "endpoint:"},
		{"credentials in URL", func(c *snapshot.S3Config) { c.Endpoint = "https://ak:sk@s3.example.test" }, "endpoint: must hold no credentials"},
		{"a path", func(c *snapshot.S3Config) { c.Endpoint = "https://s3.example.test/bucket" }, "endpoint:"},
		{"plain http off loopback", func(c *snapshot.S3Config) { c.Endpoint = "http://s3.example.test" }, "not loopback"},
		{"no bucket", func(c *snapshot.S3Config) { c.Bucket = "" }, "bucket:"},
		{"bad bucket", func(c *snapshot.S3Config) { c.Bucket = "Snaps_1" }, "bucket:"},
		{"no secret", func(c *snapshot.S3Config) { c.SecretKey = "" }, "secret_key"},
		{"bad prefix", func(c *snapshot.S3Config) { c.Prefix = "../up/" }, "prefix:"},
		{"small parts", func(c *snapshot.S3Config) { c.PartSize = 1 << 20 }, "part_size:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error with %q", err, tc.want)
			}
			if _, err := snapshot.NewS3(cfg); err == nil {
				t.Fatal("NewS3 took it")
			}
		})
	}
	for _, ok := range []string{"http://127.0.0.1:8333", "http://[::1]:8333", "http://localhost:8333"} {
		cfg := good
		cfg.Endpoint = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	insecure := good
	insecure.Endpoint, insecure.Insecure = "http://s3.example.test", true
	if err := insecure.Validate(); err != nil {
		t.Errorf("plain http with insecure set: %v", err)
	}
}
