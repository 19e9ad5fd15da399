package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/snapshot"
)

// part is one stage of a snapshot or a restore, timed alone.
type part struct {
	name  string
	bytes int64
	took  time.Duration
}

// partsResult is one runtime's stages of a snapshot and a restore of one workspace size, each
// timed alone, and the Vault transit calls a snapshot and a restore make.
type partsResult struct {
	rt              string
	sizeMiB         int
	parts           []part
	dataKey, unwrap samples
}

// archiveScript is the archive a snapshot makes in the sandbox, as package pool's keeper runs
// it: files, folders and links of the workspace, in pax format, owners numeric.
const archiveScript = `cd / && find workspace \( -type f -o -type d -o -type l \) -print0 2>/dev/null | ` +
	`LC_ALL=C tar -c --null --no-recursion --numeric-owner --format=pax --warning=no-file-changed --warning=no-file-removed -T -`

// unpackScript is the restore's tar in the sandbox, without the keeper's check of the links
// the image left (the workspace of a fresh sandbox holds none).
const unpackScript = `LC_ALL=C exec tar -x --no-same-owner -p --delay-directory-restore -C /`

// transitCalls is how many of each Vault transit call are timed; stageRuns how many times each
// stage in this process runs (the median is kept).
const (
	transitCalls = 20
	stageRuns    = 3
)

// parts times, for a workspace of sizeMiB in a lease of the big template, each stage a snapshot
// streams through (the archive made in the sandbox, its way out through the exec agent and
// the node, the filter, the SHA-256 of its ID, AES-GCM, the staging file, the store's synced
// Put) and each a restore does (decryption, the way in, tar -x in the sandbox), then the
// catalog's Save and Open end to end over the same kind of store and the node's Vault: which
// of them sets the pace.
func (n *benchNode) parts(ctx context.Context, sizeMiB int) (partsResult, error) {
	r := partsResult{rt: n.rt, sizeMiB: sizeMiB}
	add := func(name string, b int64, d time.Duration) { r.parts = append(r.parts, part{name, b, d}) }
	if err := n.full(ctx, n.big); err != nil {
		return r, err
	}
	src, err := n.lease(ctx, n.big)
	if err != nil {
		return r, err
	}
	defer n.release(ctx, src)
	want, err := fill(ctx, n.c, src, sizeMiB)
	if err == nil {
		err = n.full(ctx, n.big)
	}
	if err != nil {
		return r, err
	}

	s := time.Now()
	out, err := run(ctx, n.c, src, "sh", "-c", archiveScript+" | wc -c")
	d := time.Since(s)
	if err != nil {
		return r, fmt.Errorf("tar in the sandbox: %w", err)
	}
	var size int64
	fmt.Sscan(strings.TrimSpace(out), &size)
	add("tar -c in the sandbox, counted there (wc -c)", size, d)

	archive := bytes.NewBuffer(make([]byte, 0, size+1<<20))
	var stderr bytes.Buffer
	s = time.Now()
	code, err := n.c.Exec(ctx, src, apitype.ExecRequest{Cmd: []string{"sh", "-c", archiveScript}, Timeout: "10m"}, archive, &stderr)
	d = time.Since(s)
	if err == nil && code != 0 && code != 1 {
		err = fmt.Errorf("exit %d: %s", code, stderr.String())
	}
	if err != nil {
		return r, fmt.Errorf("tar streamed out: %w", err)
	}
	add("tar -c streamed to this process (exec agent, engine, node, API)", int64(archive.Len()), d)
	raw := archive.Bytes()

	// The engine's own exec, no agent and no node: how much of the way out is the engine's.
	var out2 counter
	d, err = n.engineExec(ctx, src, archiveScript, nil, &out2)
	if err != nil {
		return r, err
	}
	add("tar -c streamed to the host by the engine alone (docker exec, to a counter)", out2.n, d)

	uid, gid, _ := pool.ParseUser(n.big.User)
	rules := snapshot.Rules{Roots: []string{strings.TrimPrefix(n.big.Workdir, "/")}, UID: int(uid), GID: int(gid),
		MaxBytes: n.big.WorkspaceMB << 20, MaxEntries: 200_000}
	// In this process, each stage thrice, the median kept: the first write of a gigabyte
	// may pay for the page cache the machine's other work holds.
	stage := func(name string, b int64, f func(i int) error) error {
		var ds samples
		for i := range stageRuns {
			s := time.Now()
			if err := f(i); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			ds = append(ds, time.Since(s))
		}
		add(name, b, ds.q(0.5))
		return nil
	}
	size = int64(len(raw))
	if err := stage("the filter (tar in, tar out)", size, func(int) error {
		_, err := snapshot.Filter(bytes.NewReader(raw), io.Discard, rules)
		return err
	}); err != nil {
		return r, err
	}
	if err := stage("SHA-256 (the snapshot's ID)", size, func(int) error { sha256.Sum256(raw); return nil }); err != nil {
		return r, err
	}
	key := make([]byte, 32)
	rand.Read(key)
	wrapped := []byte("vault:v1:" + strings.Repeat("x", 80)) // the size of a transit-wrapped key
	var sealed bytes.Buffer
	sealed.Grow(len(raw) + len(raw)/1000 + 4096)
	if err := stage("AES-256-GCM seal, 64 KiB chunks", size, func(int) error {
		sealed.Reset()
		w, err := snapshot.NewWriter(&sealed, "bench", key, wrapped)
		if err == nil {
			_, err = w.Write(raw)
		}
		if err == nil {
			err = w.Close()
		}
		return err
	}); err != nil {
		return r, err
	}
	if err := stage("AES-256-GCM open", size, func(int) error {
		body := bytes.NewReader(sealed.Bytes())
		h, err := snapshot.ReadHeader(body)
		if err != nil {
			return err
		}
		rd, err := snapshot.NewReader(body, h, "bench", key)
		if err == nil {
			_, err = io.Copy(io.Discard, rd)
		}
		return err
	}); err != nil {
		return r, err
	}

	scratch, err := os.MkdirTemp(n.dir, "parts")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(scratch)
	blob := int64(sealed.Len())
	if err := stage("the staging file written (page cache, not synced)", blob, func(i int) error {
		return writeFile(filepath.Join(scratch, fmt.Sprintf("staging-%d.blob", i)), sealed.Bytes())
	}); err != nil {
		return r, err
	}
	store, err := snapshot.NewDir(filepath.Join(scratch, "store"))
	if err != nil {
		return r, err
	}
	if err := stage("the directory store's Put (written, fsync, rename, fsync of the folder)", blob, func(i int) error {
		return store.Put(ctx, fmt.Sprintf("blob-%d", i), bytes.NewReader(sealed.Bytes()), blob)
	}); err != nil {
		return r, err
	}

	keys, err := snapshot.NewTransit(snapshot.TransitConfig{Client: n.vault})
	if err != nil {
		return r, err
	}
	cat, err := snapshot.NewCatalog(snapshot.CatalogConfig{Store: store, Keys: keys, Staging: filepath.Join(scratch, "staging")})
	if err != nil {
		return r, err
	}
	meta := snapshot.Meta{Tenant: "statebench", Template: n.big.Name, Lease: "l-0", Paths: []string{n.big.Workdir}}
	// The tenant's transit key is made at its first data key: made here, before the Save is
	// timed, as on a node that has served the tenant before.
	if _, _, err := keys.DataKey(ctx, meta.Tenant); err != nil {
		return r, err
	}
	// Each Save is opened, read and deleted before the next, which stores its blob anew.
	var saves, opens samples
	for range stageRuns {
		s := time.Now()
		m, err := cat.Save(ctx, meta, bytes.NewReader(raw))
		if err != nil {
			return r, fmt.Errorf("the catalog's Save: %w", err)
		}
		saves = append(saves, time.Since(s))
		s = time.Now()
		_, rc, err := cat.Open(ctx, meta.Tenant, m.ID)
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if err != nil {
			return r, fmt.Errorf("the catalog's Open: %w", err)
		}
		opens = append(opens, time.Since(s))
		if err := cat.Delete(ctx, meta.Tenant, m.ID); err != nil {
			return r, err
		}
	}
	add("the catalog's Save from memory (data key, SHA-256, seal, staging, Put)", size, saves.q(0.5))
	add("the catalog's Open, read to its end (unwrap, open, verify)", size, opens.q(0.5))

	if err := n.full(ctx, n.big); err != nil {
		return r, err
	}
	dst, err := n.lease(ctx, n.big)
	if err != nil {
		return r, err
	}
	defer n.release(ctx, dst)
	stderr.Reset()
	s = time.Now()
	code, err = n.c.ExecStdin(ctx, dst, apitype.ExecRequest{Cmd: []string{"sh", "-c", unpackScript}, Timeout: "10m"}, bytes.NewReader(raw), io.Discard, &stderr)
	d = time.Since(s)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, stderr.String())
	}
	if err != nil {
		return r, fmt.Errorf("tar -x from this process: %w", err)
	}
	add("tar -x in a fresh sandbox, streamed from this process (API, node, exec agent)", int64(len(raw)), d)
	if err := n.same(ctx, dst, want); err != nil {
		return r, err
	}
	if _, err := run(ctx, n.c, dst, "find", "/workspace", "-mindepth", "1", "-delete"); err != nil {
		return r, err
	}
	if d, err = n.engineExec(ctx, dst, unpackScript, bytes.NewReader(raw), io.Discard); err != nil {
		return r, err
	}
	add("tar -x in the same sandbox emptied, streamed by the engine alone (docker exec -i)", int64(len(raw)), d)
	if err := n.same(ctx, dst, want); err != nil {
		return r, err
	}

	for range transitCalls {
		s := time.Now()
		_, w, err := keys.DataKey(ctx, meta.Tenant)
		r.dataKey = append(r.dataKey, time.Since(s))
		if err != nil {
			return r, err
		}
		s = time.Now()
		_, err = keys.Unwrap(ctx, meta.Tenant, w)
		r.unwrap = append(r.unwrap, time.Since(s))
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

// writeFile writes b to a new file at path as the catalog stages a blob: through a 256 KiB
// buffer, closed, not synced.
func writeFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 256<<10)
	for len(b) > 0 && err == nil {
		k := min(len(b), 64<<10) // the size of a sealed chunk, as the seal writes them
		_, err = w.Write(b[:k])
		b = b[k:]
	}
	if err == nil {
		err = w.Flush()
	}
	return errors.Join(err, f.Close())
}

// engineExec runs script in lease id's sandbox as the template's user through the engine's own
// exec (the docker CLI), with stdin when not nil and stdout to out, and times it: the stream
// the engine alone carries, without the exec agent, the node or the API.
func (n *benchNode) engineExec(ctx context.Context, id, script string, stdin io.Reader, out io.Writer) (time.Duration, error) {
	lv, err := n.c.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	args := []string{"exec", "-u", n.big.User}
	if stdin != nil {
		args = append(args, "-i")
	}
	cmd := exec.CommandContext(ctx, "docker", append(args, lv.Sandbox, "sh", "-c", script)...)
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, out, &stderr
	s := time.Now()
	err = cmd.Run()
	d := time.Since(s)
	// tar exits 1 when a file changed while it read it, as the keeper allows.
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 1 && stdin == nil {
		err = nil
	}
	if err != nil {
		return d, fmt.Errorf("docker exec in %s: %v: %s", lv.Sandbox, err, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}
