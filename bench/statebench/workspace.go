package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/client"
)

// A workspace of size MiB is made inside the sandbox, as its user, of random bytes no
// compression shrinks: for 100 MiB and over, a tree of treeFiles files of treeFileSize bytes
// in ten folders (what a source tree adds: an entry, a header and a write per file), and the
// rest in files of at most blobMax bytes; below 100 MiB, the size in one file.
const (
	treeFiles    = 1000
	treeFileSize = 1024
	blobMax      = 100 << 20
)

// fillScript writes the workspace: python3, one process, so that making a thousand files does
// not cost a thousand execs (slow under gVisor) in what is not measured anyway.
const fillScript = `
import os, sys
size, tree, small, most = (int(a) for a in sys.argv[1:5])
os.chdir("/workspace")
for i in range(tree):
    d = "tree/%d" % (i % 10)
    os.makedirs(d, exist_ok=True)
    with open("%s/f%04d" % (d, i), "wb") as f:
        f.write(os.urandom(small))
left, n = size - tree * small, 0
os.makedirs("data", exist_ok=True)
while left > 0:
    with open("data/blob-%d" % n, "wb") as f:
        part = min(left, most)
        left -= part
        while part > 0:
            k = min(part, 1 << 20)
            f.write(os.urandom(k))
            part -= k
    n += 1
`

// workspaceShape is what fill makes for size MiB: the content's bytes and its files.
func workspaceShape(sizeMiB int) (bytes int64, files int) {
	total := int64(sizeMiB) << 20
	tree := 0
	if sizeMiB >= 100 {
		tree = treeFiles
	}
	rest := total - int64(tree*treeFileSize)
	return total, tree + int((rest+blobMax-1)/blobMax)
}

// fill makes a workspace of sizeMiB in lease id and returns its fingerprint.
func fill(ctx context.Context, c *client.Client, id string, sizeMiB int) (string, error) {
	tree := 0
	if sizeMiB >= 100 {
		tree = treeFiles
	}
	if _, err := run(ctx, c, id, "python3", "-c", fillScript, strconv.FormatInt(int64(sizeMiB)<<20, 10), strconv.Itoa(tree),
		strconv.Itoa(treeFileSize), strconv.Itoa(blobMax)); err != nil {
		return "", fmt.Errorf("filling %d MiB in %s: %w", sizeMiB, id, err)
	}
	return fingerprint(ctx, c, id)
}

// fingerprint is a digest of the workspace's file names and sizes and of the first MiB of
// each of its files of random bytes: what a restore that lost or cut a file changes. (The
// restore verifies the whole archive's SHA-256 itself.)
func fingerprint(ctx context.Context, c *client.Client, id string) (string, error) {
	out, err := run(ctx, c, id, "sh", "-c",
		`cd /workspace && { find . -type f -printf '%P %s %m\n' | LC_ALL=C sort; for f in data/*; do [ -f "$f" ] && head -c 1048576 "$f"; done | md5sum; } | md5sum`)
	return strings.TrimSpace(out), err
}

// run runs argv in lease id and returns its output; a non-zero exit is an error with its
// stderr.
func run(ctx context.Context, c *client.Client, id string, argv ...string) (string, error) {
	var out, errOut bytes.Buffer
	code, err := c.Exec(ctx, id, apitype.ExecRequest{Cmd: argv, Timeout: "10m"}, &out, &errOut)
	if err == nil && code != 0 {
		err = fmt.Errorf("%s exited %d: %s", argv[0], code, strings.TrimSpace(errOut.String()))
	}
	return out.String(), err
}

// counter counts what is written to it.
type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

var _ io.Writer = (*counter)(nil)
