package snapshot

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound is what a Store returns for a key it does not hold.
var ErrNotFound = errors.New("no such object")

// ErrStoreDown wraps a Store's failure to answer at all (an S3 endpoint that refuses
// connections, a directory that cannot be written), as opposed to an answer that refuses.
var ErrStoreDown = errors.New("the snapshot store is unreachable")

// Store holds objects by key ("tenants/acme/blobs/<hex>"): a directory on the node (Dir) or an
// S3-compatible bucket (S3), for several nodes. Keys are made by this package only: slash-
// separated, of [a-z0-9._-] segments. Safe for concurrent use.
type Store interface {
	// Put stores the size bytes of r under key, whole or not at all: a reader never sees an
	// object half written. An upload that fails part way is resumed where it stopped (an S3
	// multipart upload's stored parts are kept) rather than begun again, within ctx.
	Put(ctx context.Context, key string, r io.ReaderAt, size int64) error
	// Get opens the object under key; ErrNotFound when there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat returns the object's size and time; ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (Object, error)
	// Delete removes the object; no error when it is already gone.
	Delete(ctx context.Context, key string) error
	// List returns the objects whose keys begin with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Object, error)
	// String names the store for errors and logs ("directory /var/lib/airlock/snapshots",
	// "s3 bucket airlock at http://127.0.0.1:8333"), never with a credential.
	String() string
}

// Object is a stored object.
type Object struct {
	Key      string
	Size     int64
	Modified time.Time
}
