package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
)

// sizeResult is one runtime's snapshots and restores of one workspace size over its rounds.
type sizeResult struct {
	rt      string
	sizeMiB int
	files   int   // the snapshot's entries (files and folders)
	archive int64 // the archive's bytes (tar headers included)
	stored  int64 // what the store holds, encrypted
	// snapshot is the API call's time as the client sees it; snapshotTook what the node
	// reports (took_ms); again a second snapshot of the same, unchanged workspace.
	snapshot, snapshotTook, again samples
	// lease is a lease from the snapshot as the client sees it; restore the part the answer
	// reports as restored.took_ms; warm how many of those leases had a warm sandbox.
	lease, restore samples
	warm           int
	// release is the source lease's release: its workspace is read and every file hashed for
	// the lease's ledger before its sandbox is destroyed.
	release samples
}

// snapshotRestore measures, rounds times, a workspace of sizeMiB filled in a fresh lease of the
// big template: a snapshot of it, a second snapshot of it unchanged, and a lease from the
// snapshot (whose workspace must match the source's). Each round's snapshot is deleted at its
// end, so that every snapshot stores its blob anew.
func (n *benchNode) snapshotRestore(ctx context.Context, sizeMiB, rounds int) (sizeResult, error) {
	r := sizeResult{rt: n.rt, sizeMiB: sizeMiB}
	for range rounds {
		if err := n.full(ctx, n.big); err != nil {
			return r, err
		}
		src, err := n.lease(ctx, n.big)
		if err != nil {
			return r, err
		}
		want, err := fill(ctx, n.c, src, sizeMiB)
		if err != nil {
			return r, errors.Join(err, n.release(ctx, src))
		}
		if err := n.full(ctx, n.big); err != nil {
			return r, errors.Join(err, n.release(ctx, src))
		}
		s := time.Now()
		snap, err := n.c.Snapshot(ctx, src, "", nil)
		d := time.Since(s)
		if err != nil {
			return r, errors.Join(fmt.Errorf("a snapshot of %d MiB: %w", sizeMiB, err), n.release(ctx, src))
		}
		r.snapshot, r.snapshotTook = append(r.snapshot, d), append(r.snapshotTook, tookMS(snap.TookMS))
		r.files, r.archive, r.stored = snap.Files, snap.Size, snap.Stored
		s = time.Now()
		again, err := n.c.Snapshot(ctx, src, "", nil)
		d = time.Since(s)
		if err == nil && again.ID != snap.ID {
			err = fmt.Errorf("the unchanged workspace's snapshot is %s, the first %s", again.ID, snap.ID)
		}
		if err != nil {
			return r, errors.Join(fmt.Errorf("a second snapshot of %d MiB: %w", sizeMiB, err), n.release(ctx, src))
		}
		r.again = append(r.again, d)
		s = time.Now()
		if err := n.release(ctx, src); err != nil {
			return r, err
		}
		r.release = append(r.release, time.Since(s))
		if err := n.full(ctx, n.big); err != nil {
			return r, err
		}
		s = time.Now()
		lv, err := n.c.Lease(ctx, api.LeaseRequest{Template: n.big.Name, Allow: []string{}, From: snap.ID})
		d = time.Since(s)
		if err != nil {
			return r, fmt.Errorf("a lease from a snapshot of %d MiB: %w", sizeMiB, err)
		}
		r.lease = append(r.lease, d)
		if lv.Restored != nil {
			r.restore = append(r.restore, tookMS(lv.Restored.TookMS))
		}
		if lv.Start == apitype.StartWarm {
			r.warm++
		}
		err = n.same(ctx, lv.ID, want)
		if err = errors.Join(err, n.release(ctx, lv.ID), n.c.DeleteSnapshot(ctx, snap.ID)); err != nil {
			return r, err
		}
	}
	return r, nil
}

// same checks that lease id's workspace has the fingerprint want.
func (n *benchNode) same(ctx context.Context, id, want string) error {
	got, err := fingerprint(ctx, n.c, id)
	if err == nil && got != want {
		err = fmt.Errorf("lease %s's workspace is not the one its state came from (fingerprint %s, want %s)", id, got, want)
	}
	return err
}

// pauseResult is one runtime's pauses and resumes of one workspace size on one template.
type pauseResult struct {
	rt      string
	memory  bool // the template's snapshot.memory
	sizeMiB int
	kept    apitype.Kept
	why     string
	// pause and resume are the calls as the client sees them; pauseTook what the node
	// reports; restore the part of the resume the answer reports as restored.took_ms.
	pause, pauseTook, resume, restore samples
	// size and stored are the pause's archive (of the workspace's files, or of a checkpoint's)
	// and what the store holds of it, as its manifest says (the last round's).
	size, stored int64
	// back counts the resumes after which the process started before the pause still ran.
	back int
}

// procFile is where the process a pause is measured with writes its pid and a number it drew:
// in /tmp, which a pause that keeps files does not keep, and a checkpoint does.
const procFile = "/tmp/statebench-proc"

// procScript is that process: it writes its pid and the number, then sleeps, as sh.
const procScript = `echo "$$ $(od -An -N4 -tu4 /dev/urandom | tr -d ' ')" > ` + procFile + `.tmp && mv ` + procFile + `.tmp ` + procFile + ` && exec sleep 86400`

// procCheck prints what procScript wrote when the process it names still runs, and fails
// otherwise.
const procCheck = `read p n < ` + procFile + ` && kill -0 "$p" && echo "$p $n"`

// pauseResume measures, rounds times, a pause asking to keep memory of a fresh lease of template
// t with a workspace of sizeMiB and a process started in the background, and its resume with a
// token minted for its task (as a backend holds one before it resumes); the resumed workspace
// must match, and whether the process came back is counted.
func (n *benchNode) pauseResume(ctx context.Context, t pool.Template, sizeMiB, rounds int) (pauseResult, error) {
	r := pauseResult{rt: n.rt, memory: t.Snapshot.Memory, sizeMiB: sizeMiB}
	for range rounds {
		if err := n.full(ctx, t); err != nil {
			return r, err
		}
		id, err := n.lease(ctx, t)
		if err != nil {
			return r, err
		}
		want, err := fill(ctx, n.c, id, sizeMiB)
		var proc string
		if err == nil {
			proc, err = n.startProcess(ctx, id)
		}
		if err == nil {
			err = n.full(ctx, t)
		}
		if err != nil {
			return r, errors.Join(err, n.release(ctx, id))
		}
		s := time.Now()
		p, err := n.c.Pause(ctx, id, true)
		d := time.Since(s)
		if err != nil {
			return r, errors.Join(fmt.Errorf("a pause of %d MiB: %w", sizeMiB, err), n.release(ctx, id))
		}
		r.pause, r.pauseTook = append(r.pause, d), append(r.pauseTook, tookMS(p.TookMS))
		r.kept, r.why = p.Kept, p.Why
		info, err := n.c.SnapshotInfo(ctx, "pause:"+id)
		if err != nil {
			return r, errors.Join(fmt.Errorf("what the pause of %s kept: %w", id, err), n.release(ctx, id))
		}
		r.size, r.stored = info.Size, info.Stored
		tok, err := n.minter.Mint("dev", p.Task, []string{}, 10*time.Minute)
		if err != nil {
			return r, errors.Join(err, n.release(ctx, id))
		}
		if err := n.full(ctx, t); err != nil {
			return r, errors.Join(err, n.release(ctx, id))
		}
		s = time.Now()
		lv, err := n.c.Resume(ctx, id, tok, 0)
		d = time.Since(s)
		if err != nil {
			return r, errors.Join(fmt.Errorf("a resume of %d MiB: %w", sizeMiB, err), n.release(ctx, id))
		}
		r.resume = append(r.resume, d)
		if lv.Restored != nil {
			r.restore = append(r.restore, tookMS(lv.Restored.TookMS))
		}
		if got, err := run(ctx, n.c, id, "sh", "-c", procCheck); err == nil && strings.TrimSpace(got) == proc {
			r.back++
		}
		if err := errors.Join(n.same(ctx, id, want), n.release(ctx, id)); err != nil {
			return r, err
		}
	}
	return r, nil
}

// startProcess starts procScript in lease id in the background and returns what it wrote once
// it has.
func (n *benchNode) startProcess(ctx context.Context, id string) (string, error) {
	if _, err := n.c.StartProcess(ctx, id, apitype.ExecRequest{Cmd: []string{"sh", "-c", procScript}}); err != nil {
		return "", fmt.Errorf("a background process in %s: %w", id, err)
	}
	var got string
	err := wait.Until(30*time.Second, "the background process in "+id+" to write "+procFile, func() bool {
		out, err := run(ctx, n.c, id, "sh", "-c", procCheck)
		got = strings.TrimSpace(out)
		return err == nil && got != ""
	})
	return got, err
}

// forkResult is one runtime's forks of one snapshot into k leases at once.
type forkResult struct {
	rt      string
	sizeMiB int
	k       int
	// all is the time until every one of the k leases was returned; each every lease's own
	// latency, restore the restored.took_ms of each; warm how many leases had a warm sandbox.
	all, each, restore samples
	warm, leases       int
}

// forkAtOnce measures, rounds times, k leases from one snapshot of a workspace of sizeMiB (taken of a
// lease of the fork template, then released) asked for at once, each from its own goroutine
// released together; every fork's workspace must match the source's.
func (n *benchNode) forkAtOnce(ctx context.Context, sizeMiB, k, rounds int) (forkResult, error) {
	r := forkResult{rt: n.rt, sizeMiB: sizeMiB, k: k}
	for range rounds {
		if err := n.full(ctx, n.fork); err != nil {
			return r, err
		}
		src, err := n.lease(ctx, n.fork)
		if err != nil {
			return r, err
		}
		want, err := fill(ctx, n.c, src, sizeMiB)
		var snap apitype.SnapshotView
		if err == nil {
			snap, err = n.c.Snapshot(ctx, src, "", nil)
		}
		if err = errors.Join(err, n.release(ctx, src)); err != nil {
			return r, err
		}
		if err := n.full(ctx, n.fork); err != nil {
			return r, err
		}
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			ids   []string
			errs  []error
			start = make(chan struct{})
		)
		for range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				s := time.Now()
				lv, err := n.c.Lease(ctx, api.LeaseRequest{Template: n.fork.Name, Allow: []string{}, From: snap.ID})
				d := time.Since(s)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				ids = append(ids, lv.ID)
				r.each = append(r.each, d)
				if lv.Restored != nil {
					r.restore = append(r.restore, tookMS(lv.Restored.TookMS))
				}
				if lv.Start == apitype.StartWarm {
					r.warm++
				}
				r.leases++
			}()
		}
		s := time.Now()
		close(start)
		wg.Wait()
		r.all = append(r.all, time.Since(s))
		for _, id := range ids {
			errs = append(errs, n.same(ctx, id, want), n.release(ctx, id))
		}
		errs = append(errs, n.c.DeleteSnapshot(ctx, snap.ID))
		if err := errors.Join(errs...); err != nil {
			return r, fmt.Errorf("a fork of %d MiB into %d leases: %w", sizeMiB, k, err)
		}
	}
	return r, nil
}
