package snapshot

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// S3Config says where an S3 store keeps its objects and how it signs in.
type S3Config struct {
	// Endpoint is the server's URL, scheme and host only: "https://s3.eu-west-1.amazonaws.com",
	// "http://127.0.0.1:8333". https uses TLS with the system's roots (or Transport's); http is
	// refused unless the host is a loopback address or Insecure is set.
	Endpoint string
	// Bucket holds the objects; it must exist (the store does not create it).
	Bucket string
	// Region signs the requests; default "us-east-1" (which most S3-compatible servers take).
	Region string
	// AccessKey and SecretKey are the static credentials the requests are signed with.
	// Security: neither appears in String, an error or a log; SecretKey never leaves the node
	// (SigV4 signs with it and sends only the signature).
	AccessKey string
	SecretKey string
	// Prefix goes before every key in the bucket ("airlock/" stores "airlock/tenants/..."), so
	// one bucket can hold several stores; "" for none. Slash-separated segments as keys are; a
	// "/" is added at the end when it is missing.
	Prefix string
	// PartSize is the size of a multipart upload's parts, and the largest object uploaded in
	// one request; default 8 MiB, at least 5 MiB (S3's least part but the last). An object
	// over 10,000 parts of it (S3's most) is cut in fewer, larger parts.
	PartSize int64
	// Insecure allows an http endpoint that is not on loopback. Security: the bytes then
	// travel in the clear (snapshots are encrypted before they reach a Store, but their keys
	// and sizes are not) and anyone on the path can replay a signed request for 15 minutes.
	Insecure bool
	// Transport carries the requests; nil for a clone of http.DefaultTransport that gives up
	// on a dial after 5 s and on a response's headers after 60 s.
	Transport http.RoundTripper
}

// DefaultPartSize and MinPartSize bound S3Config.PartSize.
const (
	DefaultPartSize = 8 << 20
	MinPartSize     = 5 << 20
	maxParts        = 10000
)

// Validate checks the config, naming the field at fault.
func (c *S3Config) Validate() error {
	u, err := url.Parse(c.Endpoint)
	switch {
	case c.Endpoint == "":
		return errors.New("endpoint: must be set")
	case err != nil:
		return fmt.Errorf("endpoint: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("endpoint: %q must be an http or https URL", u.Redacted())
	case u.User != nil:
		return errors.New("endpoint: must hold no credentials (set access_key and secret_key)")
	case u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("endpoint: %q must be a scheme and a host only", u.Redacted())
	case u.Scheme == "http" && !c.Insecure && !isLoopback(u.Hostname()):
		return fmt.Errorf("endpoint: %q is plain http to a host that is not loopback (use https, or set insecure)", u.Redacted())
	}
	if c.Bucket == "" {
		return errors.New("bucket: must be set")
	}
	if err := s3utils.CheckValidBucketNameStrict(c.Bucket); err != nil {
		return fmt.Errorf("bucket: %v", err)
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return errors.New("access_key, secret_key: both must be set")
	}
	if p := strings.TrimSuffix(c.Prefix, "/"); p != "" {
		if err := checkKey(p); err != nil {
			return fmt.Errorf("prefix: %w", err)
		}
	}
	if c.PartSize != 0 && c.PartSize < MinPartSize {
		return fmt.Errorf("part_size: %d is under S3's least part size, %d", c.PartSize, MinPartSize)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// S3 is a Store in an S3-compatible bucket, for several nodes. An object up to its part size
// is stored in one request; a larger one as a multipart upload, one part at a time (so a Put
// holds one part in memory), each part retried on its own. An upload that fails part way is
// left on the server, and the next Put of the same key resumes it: the parts already stored
// with the same size and MD5 are kept. It is aborted only when the server refuses it outright.
// An upload no Put comes back for stays until the bucket's lifecycle rule for incomplete
// multipart uploads (which a bucket for snapshots should have) or a Delete of its key ends it.
//
// Errors name the endpoint and the bucket; a failure to reach the server, after the retries,
// wraps ErrStoreDown. Safe for concurrent use.
type S3 struct {
	core     minio.Core
	bucket   string
	prefix   string
	partSize int64
	name     string   // String's
	secrets  []string // what errors must never show
	attempts int      // calls of a request, the first included, before a failure is final
	backoff  time.Duration
}

var _ Store = (*S3)(nil)

// The retries: four calls of a request, 100, 200, then 400 ms apart, so a store that is down
// fails a call in under a second, and one that blinks is not noticed.
const (
	s3Attempts = 4
	s3Backoff  = 100 * time.Millisecond
)

// NewS3 returns a store in cfg's bucket. It does not contact the server: a store that is down
// fails the calls made of it, not the start of the node.
func NewS3(cfg S3Config) (*S3, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	u, _ := url.Parse(cfg.Endpoint)
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.Prefix != "" && !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		t.ResponseHeaderTimeout = 60 * time.Second
		tr = t
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       cfg.Region, // given, so no request asks the bucket's location first
		Transport:    tr,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1, // S3.retry retries, with its own bounds
	})
	if err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	name := fmt.Sprintf("s3 bucket %s at %s://%s", cfg.Bucket, u.Scheme, u.Host)
	if cfg.Prefix != "" {
		name += " under " + cfg.Prefix
	}
	return &S3{
		core: minio.Core{Client: client}, bucket: cfg.Bucket, prefix: cfg.Prefix,
		partSize: cfg.PartSize, name: name, secrets: redactable(cfg.SecretKey, cfg.AccessKey),
		attempts: s3Attempts, backoff: s3Backoff,
	}, nil
}

// String names the bucket and the endpoint: "s3 bucket airlock at http://127.0.0.1:8333".
func (s *S3) String() string { return s.name }

// Put stores the object in one request when it fits in a part, else as a multipart upload
// that resumes the key's unfinished one, if the server holds one.
func (s *S3) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%s: put %s: negative size %d", s, key, size)
	}
	if size <= s.partSize {
		buf := make([]byte, size)
		if err := readFull(r, buf, 0); err != nil {
			return fmt.Errorf("%s: put %s: reading its bytes: %w", s, key, err)
		}
		sum := md5.Sum(buf)
		err := s.retry(ctx, func() error {
			_, err := s.core.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(buf), size,
				base64.StdEncoding.EncodeToString(sum[:]), "", minio.PutObjectOptions{})
			return err
		})
		if err != nil {
			return s.fail("put", key, err)
		}
		return nil
	}
	return s.putMultipart(ctx, key, r, size)
}

// partSizeFor is the part size of an object of size bytes: the configured one, or larger when
// that would take more than S3's 10,000 parts. It depends on size alone, so a resumed upload
// cuts the object as the interrupted one did.
func (s *S3) partSizeFor(size int64) int64 {
	p := s.partSize
	if size > p*maxParts {
		const mib = 1 << 20
		p = ((size+maxParts-1)/maxParts + mib - 1) / mib * mib
	}
	return p
}

func (s *S3) putMultipart(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	name := s.prefix + key
	id, stored, err := s.resumable(ctx, key)
	if err != nil {
		return err
	}
	if id == "" {
		err := s.retry(ctx, func() (err error) {
			id, err = s.core.NewMultipartUpload(ctx, s.bucket, name, minio.PutObjectOptions{})
			return err
		})
		if err != nil {
			return s.fail("put", key, err)
		}
	}
	p := s.partSizeFor(size)
	n := int((size + p - 1) / p)
	buf := make([]byte, p)
	parts := make([]minio.CompletePart, 0, n)
	for i := 1; i <= n; i++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: put %s: %w", s, key, err) // the upload stays, to resume
		}
		off := int64(i-1) * p
		part := buf[:min(p, size-off)]
		if err := readFull(r, part, off); err != nil {
			// The parts stored so far stay, for the next Put to resume from.
			return fmt.Errorf("%s: put %s: reading part %d of %d: %w", s, key, i, n, err)
		}
		sum := md5.Sum(part)
		etag := hex.EncodeToString(sum[:])
		if got, ok := stored[i]; ok && got.Size == int64(len(part)) && strings.Trim(got.ETag, `"`) == etag {
			parts = append(parts, minio.CompletePart{PartNumber: i, ETag: got.ETag})
			continue
		}
		var done minio.ObjectPart
		err := s.retry(ctx, func() (err error) {
			done, err = s.core.PutObjectPart(ctx, s.bucket, name, id, i, bytes.NewReader(part), int64(len(part)),
				minio.PutObjectPartOptions{Md5Base64: base64.StdEncoding.EncodeToString(sum[:])})
			return err
		})
		if err != nil {
			return s.giveUp(ctx, key, id, fmt.Sprintf("put part %d of %d of", i, n), err)
		}
		parts = append(parts, minio.CompletePart{PartNumber: i, ETag: done.ETag})
	}
	err = s.retry(ctx, func() error {
		_, err := s.core.CompleteMultipartUpload(ctx, s.bucket, name, id, parts, minio.PutObjectOptions{})
		return err
	})
	if code(err) == "NoSuchUpload" {
		// A call whose answer was lost may have completed it: then the object is there.
		if o, serr := s.Stat(ctx, key); serr == nil && o.Size == size {
			return nil
		}
	}
	if err != nil {
		return s.giveUp(ctx, key, id, "complete the upload of", err)
	}
	return nil
}

// resumable returns the newest unfinished multipart upload of key, and the parts it holds by
// number; "" when there is none.
func (s *S3) resumable(ctx context.Context, key string) (string, map[int]minio.ObjectPart, error) {
	name := s.prefix + key
	ids, err := s.uploads(ctx, key)
	if err != nil || len(ids) == 0 {
		return "", nil, err
	}
	id := ids[len(ids)-1]
	stored := map[int]minio.ObjectPart{}
	marker := 0
	for {
		var res minio.ListObjectPartsResult
		err := s.retry(ctx, func() (err error) {
			res, err = s.core.ListObjectParts(ctx, s.bucket, name, id, marker, 1000)
			return err
		})
		if code(err) == "NoSuchUpload" {
			return "", nil, nil // finished or aborted since it was listed: begin anew
		}
		if err != nil {
			return "", nil, s.fail("list the stored parts of", key, err)
		}
		for _, p := range res.ObjectParts {
			stored[p.PartNumber] = p
		}
		if !res.IsTruncated || res.NextPartNumberMarker <= marker {
			break
		}
		marker = res.NextPartNumberMarker
	}
	return id, stored, nil
}

// uploads returns the IDs of key's unfinished multipart uploads, oldest first.
func (s *S3) uploads(ctx context.Context, key string) ([]string, error) {
	name := s.prefix + key
	var found []minio.ObjectMultipartInfo
	keyMarker, idMarker := "", ""
	for {
		var res minio.ListMultipartUploadsResult
		err := s.retry(ctx, func() (err error) {
			res, err = s.core.ListMultipartUploads(ctx, s.bucket, name, keyMarker, idMarker, "", 1000)
			return err
		})
		if err != nil {
			return nil, s.fail("list the unfinished uploads of", key, err)
		}
		for _, u := range res.Uploads {
			if u.Key == name { // the listing's prefix also matches longer keys
				found = append(found, u)
			}
		}
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			break
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
	slices.SortStableFunc(found, func(a, b minio.ObjectMultipartInfo) int { return a.Initiated.Compare(b.Initiated) })
	ids := make([]string, len(found))
	for i, u := range found {
		ids[i] = u.UploadID
	}
	return ids, nil
}

// giveUp returns a multipart upload's failure, aborting the upload first when the failure is
// final: the server refused, as opposed to being unreachable or ctx ending, after which the
// next Put resumes it.
func (s *S3) giveUp(ctx context.Context, key, id, op string, err error) error {
	err = s.fail(op, key, err)
	if errors.Is(err, ErrStoreDown) || ctx.Err() != nil {
		return err
	}
	if aerr := s.core.AbortMultipartUpload(context.WithoutCancel(ctx), s.bucket, s.prefix+key, id); aerr != nil && code(aerr) != "NoSuchUpload" {
		return fmt.Errorf("%w (and aborting the upload: %v)", err, s.redact(aerr.Error()))
	}
	return err
}

// Get opens the object; the caller closes it.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var body io.ReadCloser
	err := s.retry(ctx, func() (err error) {
		body, _, _, err = s.core.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
		return err
	})
	if err != nil {
		return nil, s.fail("get", key, err)
	}
	return &s3Body{ReadCloser: body, s: s, key: key}, nil
}

// s3Body is an object's body, whose read errors say which store and object failed.
type s3Body struct {
	io.ReadCloser
	s   *S3
	key string
}

func (b *s3Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = b.s.fail("read", b.key, err)
	}
	return n, err
}

// Stat returns the object's size and the time the server last stored it.
func (s *S3) Stat(ctx context.Context, key string) (Object, error) {
	if err := checkKey(key); err != nil {
		return Object{}, err
	}
	var info minio.ObjectInfo
	err := s.retry(ctx, func() (err error) {
		info, err = s.core.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
		return err
	})
	if code(err) == "NoSuchKey" {
		// A HEAD's answer has no body, so a bucket that is missing looks like a key that is:
		// ask about the bucket, lest a store that is not set up look empty.
		var ok bool
		berr := s.retry(ctx, func() (err error) {
			ok, err = s.core.BucketExists(ctx, s.bucket)
			return err
		})
		if berr != nil {
			return Object{}, s.fail("stat", key, berr)
		}
		if !ok {
			return Object{}, s.fail("stat", key, minio.ErrorResponse{Code: "NoSuchBucket", Message: "The specified bucket does not exist", StatusCode: http.StatusNotFound})
		}
	}
	if err != nil {
		return Object{}, s.fail("stat", key, err)
	}
	return Object{Key: key, Size: info.Size, Modified: info.LastModified}, nil
}

// Delete removes the object, and aborts the key's unfinished uploads, so nothing of it stays.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	err := s.retry(ctx, func() error {
		return s.core.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	})
	if err != nil && code(err) != "NoSuchKey" {
		return s.fail("delete", key, err)
	}
	ids, err := s.uploads(ctx, key)
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := s.retry(ctx, func() error {
			return s.core.AbortMultipartUpload(ctx, s.bucket, s.prefix+key, id)
		})
		if err != nil && code(err) != "NoSuchUpload" {
			return s.fail("abort the unfinished upload of", key, err)
		}
	}
	return nil
}

// List returns the objects under prefix, sorted by key. Objects in the bucket under the
// store's prefix whose names are not keys (put there by something else) are left out.
func (s *S3) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	var out []Object
	err := s.retry(ctx, func() error {
		out = out[:0]
		lctx, cancel := context.WithCancel(ctx)
		defer cancel() // ends the listing's goroutine on an early return
		for o := range s.core.Client.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			key := strings.TrimPrefix(o.Key, s.prefix)
			if checkKey(key) != nil {
				continue
			}
			out = append(out, Object{Key: key, Size: o.Size, Modified: o.LastModified})
		}
		return nil
	})
	if err != nil {
		return nil, s.fail("list", prefix, err)
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// retry calls f until it succeeds, fails for good, or s.attempts calls have failed for a
// reason worth another try (see retryable), waiting twice as long after each.
func (s *S3) retry(ctx context.Context, f func() error) error {
	pause := s.backoff
	for i := 1; ; i++ {
		err := f()
		if err == nil || i == s.attempts || !retryable(ctx, err) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause *= 2
	}
}

// retryable reports whether a call that failed with err may succeed if made again: the
// server was not reached or the connection broke (and ctx has not ended), or the server said
// it is failing or busy.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		return resp.StatusCode >= 500 || resp.Code == "SlowDown" || resp.Code == "RequestTimeout"
	}
	var netErr net.Error
	var urlErr *url.Error
	return errors.As(err, &netErr) || errors.As(err, &urlErr) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// code is the S3 error code of err ("NoSuchKey"), or "".
func code(err error) string {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		return resp.Code
	}
	return ""
}

// fail wraps a failed call's err: ErrNotFound for a key the bucket does not hold, ErrStoreDown
// for what retryable would have tried again.
func (s *S3) fail(op, key string, err error) error {
	e := &s3Error{store: s.name, op: op, key: key, err: err, msg: s.redact(err.Error())}
	switch c := code(err); {
	case c == "NoSuchKey":
		e.kind = ErrNotFound
	case c == "NoSuchBucket":
		// An answer, but one that says the store is not set up: nothing here can be had.
		e.kind = ErrStoreDown
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
	case retryable(context.Background(), err):
		e.kind = ErrStoreDown
	}
	return e
}

// redactable returns the credentials worth taking out of messages: those of 6 bytes or more. A
// shorter one is no secret (it falls to a guess), and taking it out would garble the rest.
func redactable(creds ...string) []string {
	var out []string
	for _, c := range creds {
		if len(c) >= 6 {
			out = append(out, c)
		}
	}
	return out
}

// redact removes the store's credentials from a message: its text comes from the server and
// the HTTP client, neither of which should echo one, but an error may be logged anywhere.
func (s *S3) redact(msg string) string {
	for _, secret := range s.secrets {
		msg = strings.ReplaceAll(msg, secret, "[redacted]")
	}
	return msg
}

// s3Error is an S3 store's failed call. Its text is redacted once, when it is made.
type s3Error struct {
	store, op, key string
	kind           error // ErrNotFound, ErrStoreDown, or nil
	err            error
	msg            string
}

func (e *s3Error) Error() string {
	if e.kind != nil {
		return fmt.Sprintf("%s: %s %s: %v: %s", e.store, e.op, e.key, e.kind, e.msg)
	}
	return fmt.Sprintf("%s: %s %s: %s", e.store, e.op, e.key, e.msg)
}

func (e *s3Error) Unwrap() []error {
	if e.kind != nil {
		return []error{e.kind, e.err}
	}
	return []error{e.err}
}
