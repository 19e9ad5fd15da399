package pool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/snapshot"
)

// Paused is a paused lease: no sandbox, no binding, no credential; its state is a snapshot of
// kind pause, which is the record of the pause itself (so any node of the store can list and
// resume it).
type Paused struct {
	Lease    string
	Tenant   string
	Task     string
	Template string
	Kept     apitype.Kept
	Snapshot string
	Paused   time.Time
	Until    time.Time
	Took     time.Duration
	// Why says why memory was not kept when it was asked for.
	Why string
	// Keep: what the pause kept becomes a snapshot if the lease expires paused.
	Keep bool
}

// ErrLeaseState is what a pause of a paused lease, or a resume of a running one, is refused
// with.
var ErrLeaseState = errors.New("the lease is not in the state this asks for")

// The labels a pause's manifest carries.
const (
	labelTask  = "task"
	labelUntil = "until"
	labelKept  = "kept"
	labelKeep  = "keep"
)

// pausedOf reads a pause's manifest.
func pausedOf(m snapshot.Manifest) Paused {
	until, _ := time.Parse(time.RFC3339Nano, m.Labels[labelUntil])
	return Paused{Lease: m.Lease, Tenant: m.Tenant, Task: m.Labels[labelTask], Template: m.Template,
		Kept: apitype.Kept(m.Labels[labelKept]), Snapshot: m.ID, Paused: m.Created, Until: until, Keep: m.Labels[labelKeep] == "true"}
}

// Pause keeps tenant's lease id's workspace and declared paths as a snapshot, then ends its
// sandbox as a release does, except that the lease goes on, paused: its binding goes first
// (connections through the gateway are closed and their end recorded), everything minted for
// it is revoked, its sandbox is destroyed. memory asks to keep running processes too: where
// the template and the runtime can (memory.go), the pause keeps a checkpoint of the sandbox
// instead, and a resume brings its processes back; elsewhere it keeps the files and says why.
// If the state cannot be kept the lease runs on.
func (k *keeper) Pause(ctx context.Context, tenant, id string, memory bool) (Paused, error) {
	return k.PauseWith(ctx, tenant, id, PauseOptions{Memory: memory})
}

// PauseOptions are what a pause may ask for.
type PauseOptions struct {
	// Memory asks to keep running processes too (see Pause).
	Memory bool
	// Keep asks that, should the lease stay paused past its template's max_paused, what the
	// pause kept becomes a snapshot of the tenant's (named "paused-LEASE") rather than being
	// deleted with the lease.
	Keep bool
}

// PauseWith is Pause with opts.
func (k *keeper) PauseWith(ctx context.Context, tenant, id string, opts PauseOptions) (Paused, error) {
	memory := opts.Memory
	if k.catalog == nil {
		return Paused{}, ErrNoSnapshots
	}
	start := time.Now()
	l, err := k.table.Held(ctx, tenant, id)
	if errors.Is(err, ErrLeaseNotFound) {
		if _, perr := k.pauseOf(ctx, tenant, id); perr == nil {
			return Paused{}, fmt.Errorf("%w: lease %s is paused already", ErrLeaseState, id)
		}
	}
	if err != nil {
		return Paused{}, err
	}
	done, err := k.archiving.begin(l.ID)
	if err != nil {
		return Paused{}, err
	}
	defer done()
	t := k.templates[l.Template]
	now := time.Now()
	p := Paused{Lease: l.ID, Tenant: l.Tenant, Task: l.Task, Template: l.Template, Kept: apitype.KeptFiles,
		Paused: now, Until: now.Add(t.maxPaused())}
	labels := func(kept apitype.Kept) map[string]string {
		labels := map[string]string{labelTask: l.Task, labelUntil: p.Until.Format(time.RFC3339Nano), labelKept: string(kept)}
		if opts.Keep {
			labels[labelKeep] = "true"
		}
		if kept == apitype.KeptMemory {
			labels[labelForm] = formCheckpoint
		}
		return labels
	}
	p.Keep = opts.Keep
	if memory {
		if p.Why = k.checkpointable(ctx, t, opts.Keep); p.Why == "" {
			return k.pauseMemory(ctx, l, t, p, labels, start)
		}
	}
	m, err := k.save(ctx, l, snapshot.Meta{Kind: snapshot.KindPause, Pinned: true, Labels: labels(apitype.KeptFiles)}, t.Snapshot.Paths)
	k.record(ctx, l, EventSnapshot, m, err)
	if err != nil {
		return Paused{}, fmt.Errorf("the lease runs on, not paused: %w", err)
	}
	p.Snapshot = m.ID
	// From here the lease is paused: a failure to end the sandbox is the table's to record
	// and retry (as at a release), not a reason to leave the lease running.
	err = k.table.pauseEnd(ctx, l, pauseNote(p))
	if errors.Is(err, ErrLeaseNotFound) {
		// A release or an expiry ended the lease while it was archived: it ended as that, and
		// what the pause kept goes, or the lease would come back as paused against the release.
		return Paused{}, k.dropPause(ctx, l, m)
	}
	if err != nil {
		return Paused{}, err
	}
	p.Took = time.Since(start)
	return p, nil
}

// pauseNote is what the pause record says of p.
func pauseNote(p Paused) string {
	return fmt.Sprintf("paused until %s; kept %s in snapshot %s", p.Until.UTC().Format(time.RFC3339), p.Kept, p.Snapshot)
}

// dropPause deletes m, what a pause of l kept when l ended meanwhile (released or expired),
// and says so.
func (k *keeper) dropPause(ctx context.Context, l Lease, m snapshot.Manifest) error {
	ctx = context.WithoutCancel(ctx) // the lease has ended: what was kept of it goes regardless
	why := "the lease ended (released or expired) while it was being paused"
	if err := k.catalog.Delete(ctx, l.Tenant, m.Ref()); err != nil {
		k.log.Error("deleting what the pause of a lease that ended meanwhile kept", "lease", l.ID, "snapshot", m.ID, "err", err)
		why += "; deleting what the pause kept failed (the paused lease is released when it expires): " + err.Error()
	} else {
		k.write(ctx, audit.Record{Kind: audit.KindFile, Event: EventSnapshotDelete, Node: k.node, Tenant: l.Tenant, Lease: l.ID, Task: l.Task,
			Path: strings.Join(m.Paths, " "), Size: m.Size, SHA256: m.ID, Decision: audit.Allow, Reason: why + ": its pause's snapshot is deleted"})
	}
	return fmt.Errorf("%w: lease %s: %s; nothing is kept", ErrLeaseNotFound, l.ID, why)
}

// PausedLeases lists tenant's paused leases.
func (k *keeper) PausedLeases(ctx context.Context, tenant string) ([]Paused, error) {
	if k.catalog == nil {
		return nil, nil
	}
	all, err := k.catalog.List(ctx, tenant)
	if err != nil {
		return nil, k.mapErr(err)
	}
	var out []Paused
	for _, m := range all {
		if m.Kind == snapshot.KindPause {
			out = append(out, pausedOf(m))
		}
	}
	return out, nil
}

// pauseOf finds tenant's paused lease id.
func (k *keeper) pauseOf(ctx context.Context, tenant, id string) (snapshot.Manifest, error) {
	if k.catalog == nil {
		return snapshot.Manifest{}, ErrNoSnapshots
	}
	if !leaseID(id) {
		return snapshot.Manifest{}, fmt.Errorf("%w: %q is not a lease id", ErrLeaseNotFound, id)
	}
	m, err := k.catalog.Get(ctx, tenant, pauseRef(id))
	if errors.Is(err, snapshot.ErrNoSnapshot) || errors.Is(err, snapshot.ErrNotFound) {
		return snapshot.Manifest{}, fmt.Errorf("%w: %s is not a paused lease of tenant %s", ErrLeaseNotFound, id, tenant)
	}
	if err != nil {
		return snapshot.Manifest{}, k.mapErr(err)
	}
	if m.Kind != snapshot.KindPause || m.Lease != id {
		return snapshot.Manifest{}, fmt.Errorf("%w: %s is not a paused lease of tenant %s", ErrLeaseNotFound, id, tenant)
	}
	return m, nil
}

// claimPaused claims paused lease id for a resume or a release of it (doing says which), one
// at a time, across nodes: while a resume brings it back it cannot be released, nor resumed
// again. unclaim gives the claim up, once the resume or release is done either way: a lease
// that was resumed runs, and a resume of a running lease is refused as that (so the lease may
// be paused and resumed again at once).
func (k *keeper) claimPaused(ctx context.Context, id, doing string) (unclaim func(), err error) {
	claim, holder := "resume:"+id, k.node+" "+doing+" "+strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := k.claim(ctx, claim, holder, time.Now().Add(teardownTimeout)); err != nil {
		if errors.Is(err, ErrJTIInUse) {
			return nil, fmt.Errorf("%w: paused lease %s is being resumed or released already", ErrLeaseState, id)
		}
		return nil, err
	}
	return func() {
		if err := k.unclaim(context.WithoutCancel(ctx), claim, holder); err != nil {
			k.log.Error("giving up the claim of a paused lease", "lease", id, "doing", doing, "err", err)
		}
	}, nil
}

// pauseRef names lease id's pause in the catalog.
func pauseRef(id string) string { return "pause:" + id }

// ResumeRequest brings a paused lease back.
type ResumeRequest struct {
	Tenant string
	Lease  string
	// Token is a task token for the lease's task (the paused lease holds none): its scopes are
	// the resumed lease's, minted afresh.
	Token string
	TTL   time.Duration
	Key   string
}

// Resume brings tenant's paused lease back in a warm sandbox of its template with its state
// restored, under a new binding for the token's scopes; nothing minted before the pause is
// valid (it was revoked when the lease paused). The lease keeps its id.
func (k *keeper) Resume(ctx context.Context, req ResumeRequest) (Lease, error) {
	if _, err := k.table.Get(ctx, req.Tenant, req.Lease); err == nil {
		return Lease{}, fmt.Errorf("%w: lease %s is running, not paused", ErrLeaseState, req.Lease)
	}
	m, err := k.pauseOf(ctx, req.Tenant, req.Lease)
	if err != nil {
		return Lease{}, err
	}
	p := pausedOf(m)
	if !time.Now().Before(p.Until) {
		return Lease{}, fmt.Errorf("%w: lease %s stayed paused past %s (snapshot.max_paused) and is released", ErrLeaseNotFound, p.Lease, p.Until.UTC().Format(time.RFC3339))
	}
	// One resume wins: the claim lasts as long as a resume may take, and a resume that fails
	// gives it up, so a refused token does not hold back the right one.
	unclaim, err := k.claimPaused(ctx, p.Lease, "resume")
	if err != nil {
		return Lease{}, err
	}
	restore := k.restorer(m)
	if m.Labels[labelForm] == formCheckpoint {
		restore = k.checkpointRestorer(m)
	}
	l, err := k.table.grant(ctx, LeaseRequest{Tenant: req.Tenant, Template: p.Template, Token: req.Token, TTL: req.TTL, Key: req.Key, From: m.ID},
		grantOptions{id: p.Lease, task: p.Task, event: audit.EventResume, restore: restore})
	if err != nil {
		unclaim()
		return Lease{}, err
	}
	if m.Labels[labelForm] == formCheckpoint {
		k.ops.adopt(l, carriedOf(m.Labels))
	}
	// The lease is resumed whether or not its caller waits for the answer: its pause goes all
	// the same, or the running lease would be listed as paused too, and once released could be
	// resumed again from what the pause kept.
	if err := k.catalog.Delete(context.WithoutCancel(ctx), req.Tenant, m.Ref()); err != nil {
		// The claim is kept (until it lapses), so the pause left listed is not resumed again
		// meanwhile; once it lapses the running lease refuses a resume.
		k.log.Error("deleting a resumed lease's pause", "lease", l.ID, "snapshot", m.ID, "err", err)
		return l, nil
	}
	unclaim()
	return l, nil
}

// reapPaused releases the paused leases of tenants whose max_paused has passed: their pause
// snapshot is deleted and the end recorded. It applies retention to the tenants' snapshots too
// (age passes without a save; the catalog records what it prunes).
func (k *keeper) reapPaused(ctx context.Context, tenants []string) {
	if k.catalog == nil {
		return
	}
	for _, tenant := range tenants {
		if _, err := k.catalog.Prune(ctx, tenant); err != nil {
			k.log.Error("applying snapshots.retention", "tenant", tenant, "err", err)
		}
		all, err := k.catalog.List(ctx, tenant)
		if err != nil {
			k.log.Error("listing paused leases", "tenant", tenant, "err", err)
			continue
		}
		for _, m := range all {
			if m.Kind != snapshot.KindPause {
				continue
			}
			p := pausedOf(m)
			if time.Now().Before(p.Until) {
				continue
			}
			// Not while a resume or a release of it is under way.
			unclaim, err := k.claimPaused(ctx, p.Lease, "expire")
			if err != nil {
				continue
			}
			fate := "its state is deleted"
			if p.Keep && m.Labels[labelForm] == formCheckpoint {
				// Never written so by this node (a pause with keep keeps files): a checkpoint is
				// no snapshot of files, and keeping it would be tried at every pass.
				fate = "its state, a checkpoint, cannot be kept as a snapshot of files, and is deleted"
			} else if p.Keep {
				kept, err := k.keepAsSnapshot(ctx, m)
				if err != nil {
					// Deleted only once kept: the next pass tries again.
					k.log.Error("keeping an expired pause as a snapshot", "lease", p.Lease, "err", err)
					unclaim()
					continue
				}
				fate = fmt.Sprintf("its state is kept, as asked, as snapshot %s (%q)", kept.ID, kept.Name)
			}
			err = k.catalog.Delete(ctx, tenant, m.Ref())
			unclaim()
			if err != nil {
				k.log.Error("releasing a paused lease", "lease", p.Lease, "err", err)
				continue
			}
			k.write(ctx, audit.Record{Kind: audit.KindLease, Event: audit.EventExpiry, Node: k.node, Tenant: tenant, Lease: p.Lease, Task: p.Task,
				Reason: fmt.Sprintf("paused past %s (snapshot.max_paused of template %s); %s", p.Until.UTC().Format(time.RFC3339), p.Template, fate)})
		}
	}
}

// PausedLease returns tenant's paused lease id.
func (k *keeper) PausedLease(ctx context.Context, tenant, id string) (Paused, error) {
	m, err := k.pauseOf(ctx, tenant, id)
	if err != nil {
		return Paused{}, err
	}
	return pausedOf(m), nil
}

// ReleasePaused ends tenant's paused lease id: what its pause kept is deleted, and the end
// recorded as a release.
func (k *keeper) ReleasePaused(ctx context.Context, tenant, id string) error {
	// As a release of a running lease: carried out whether or not the caller waits for it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	m, err := k.pauseOf(ctx, tenant, id)
	if err != nil {
		return err
	}
	unclaim, err := k.claimPaused(ctx, id, "release")
	if err != nil {
		return err
	}
	defer unclaim()
	if err := k.catalog.Delete(ctx, tenant, m.Ref()); err != nil {
		return k.mapErr(err)
	}
	p := pausedOf(m)
	k.write(ctx, audit.Record{Kind: audit.KindLease, Event: audit.EventRelease, Node: k.node, Tenant: tenant, Lease: p.Lease, Task: p.Task,
		Reason: fmt.Sprintf("released while paused; its snapshot %s is deleted", m.ID)})
	return nil
}

// leaseID reports whether id has the form randomID gives lease ids ("l-" and hex).
func leaseID(id string) bool {
	hex, ok := strings.CutPrefix(id, "l-")
	return ok && len(hex) > 0 && len(hex) <= 64 && strings.Trim(hex, "0123456789abcdef") == ""
}

// keepAsSnapshot saves what pause m kept as a snapshot of its tenant, named "paused-LEASE": the
// archive is read back and saved again (its blob, the same bytes, is not stored twice).
func (k *keeper) keepAsSnapshot(ctx context.Context, m snapshot.Manifest) (snapshot.Manifest, error) {
	if m.Labels[labelForm] == formCheckpoint {
		// A pause with keep never keeps memory (checkpointable); a label saying otherwise
		// was not written by this node, and a checkpoint is no snapshot of files.
		return snapshot.Manifest{}, fmt.Errorf("pause %s of lease %s is a checkpoint, which cannot be kept as a snapshot of files", m.ID, m.Lease)
	}
	got, body, err := k.catalog.Open(ctx, m.Tenant, m.Ref())
	if err != nil {
		return snapshot.Manifest{}, err
	}
	defer body.Close()
	return k.catalog.Save(ctx, snapshot.Meta{Tenant: got.Tenant, Name: "paused-" + got.Lease, Template: got.Template, Image: got.Image,
		Lease: got.Lease, Kind: snapshot.KindSnapshot, Paths: got.Paths, Files: func() int { return got.Files }}, body)
}
