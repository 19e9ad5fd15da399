package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/airlock-dev/airlock/pool"
)

// Checkpoints go through the engine's checkpoint API (which needs dockerd's experimental mode)
// and gVisor's runsc, which the engine drives as it drives runc: `runsc checkpoint` when asked
// to checkpoint, `runsc restore` when a container is started from a checkpoint. runc would
// need CRIU; why it cannot here is found by probing (runcWhy).
//
// The engine writes a checkpoint wherever it is asked to, but starts a container only from a
// checkpoint in that container's own directory of the engine's data root (a custom directory
// is refused: "custom checkpointdir is not supported"), so Restore links the files there for
// the start and removes them after. Both need the node on the engine's host, as root: the node
// reads what the engine wrote and writes into the engine's data root.

var _ pool.Checkpointer = (*Runtime)(nil)

// checkpointTimeout bounds an engine checkpoint or restore: about 2 s for a sandbox holding
// 100 MiB on this machine, so this covers several GiB.
const checkpointTimeout = 5 * time.Minute

// stateFile is the file every runsc checkpoint holds (gVisor's kernel state; the memory is
// beside it in pages.img): what Restore looks for before it stops anything.
const stateFile = "checkpoint.img"

// engineDir is the directory the engine writes a checkpoint into, under the one Checkpoint is
// given.
const engineDir = "engine"

// nonceFile is added to the files a restore starts from. The engine uploads them to containerd
// as a tar whose digest would otherwise equal the one containerd keeps for a few seconds after
// the checkpoint (until its garbage collector runs), and a restore that soon fails with
// "content sha256:...: already exists" (seen with Docker 20.10 and containerd 1.6).
const nonceFile = "airlock-restore"

// noExperimental says why an engine without experimental mode cannot checkpoint.
const noExperimental = "the Docker engine runs without experimental mode, which its checkpoint API needs: " +
	"start dockerd with --experimental (scripts/engine.sh does) or set \"experimental\": true in its daemon.json, then restart it"

// CanCheckpoint reports whether t's sandboxes can be checkpointed: under gVisor when the engine
// has t's runtime and runs in experimental mode; never under runc, and why is probed
// (runcWhy).
func (r *Runtime) CanCheckpoint(ctx context.Context, t pool.Template) (bool, string) {
	if rt, _ := t.RuntimePlatform(); rt != "runsc" {
		return false, runcWhy()
	}
	info, err := r.cli.Info(ctx)
	if err != nil {
		return false, fmt.Sprintf("the Docker engine did not answer: %v", err)
	}
	if err := CannotRun(RuntimesOf(info), t); err != nil {
		return false, err.Error()
	}
	if !info.ExperimentalBuild {
		return false, noExperimental
	}
	return true, ""
}

// Checkpoint writes sb's state into dir through the engine, with sb left running, and then
// kills sb (checkpointRunning says why in two steps). A checkpoint that fails leaves sb
// running as it was.
func (r *Runtime) Checkpoint(ctx context.Context, sb pool.Sandbox, dir string) error {
	ins, err := r.cli.ContainerInspect(ctx, sb.ID)
	if err != nil {
		return fmt.Errorf("docker: inspect %s: %w", short(sb.ID), err)
	}
	if err := r.checkpointable(ctx, ins.HostConfig.Runtime); err != nil {
		return fmt.Errorf("sandbox %s: %w", short(sb.ID), err)
	}
	if _, ok := wiredAddr(ins.Config.Labels); ok {
		return fmt.Errorf("sandbox %s: %w: the node wired it into the bridge, and a restore keeps only the engine's endpoints (templates that keep memory stay on the engine's network)", short(sb.ID), pool.ErrCannotCheckpoint)
	}
	if ins.State == nil || !ins.State.Running {
		return fmt.Errorf("%w: sandbox %s is not running", pool.ErrBadRequest, short(sb.ID))
	}
	// The engine resolves a relative path against its own working directory.
	if dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", short(sb.ID), err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", short(sb.ID), err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return fmt.Errorf("checkpoint of %s: %s is not an empty directory (%d entries, %v)", short(sb.ID), dir, len(ents), err)
	}
	// Not cut off by the caller: a checkpoint abandoned midway leaves a sandbox that may be
	// stopped, or not, with a directory that may be whole, or not.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	if isMainAgent(ins.Config) {
		// Detached first, between two of the node's frames, so that the agent the checkpoint
		// keeps is not halfway through reading one (its commands run on; their callers here
		// see the agent gone). Restore attaches again.
		r.agents.drop(sb.ID)
	}
	if err := r.checkpointRunning(cctx, sb.ID, dir); err != nil {
		emptyDir(dir)
		return fmt.Errorf("docker: checkpoint %s: %w", short(sb.ID), err) // it runs on, untouched
	}
	err = r.cli.ContainerKill(cctx, sb.ID, "KILL")
	// The agent is gone with the sandbox; Restore starts another.
	r.agents.drop(sb.ID)
	if err == nil {
		err = r.waitStopped(cctx, sb.ID)
	}
	if err == nil {
		err = moveUp(filepath.Join(dir, engineDir))
	}
	if err != nil {
		emptyDir(dir)
		return fmt.Errorf("docker: checkpoint %s: %w", short(sb.ID), err)
	}
	// What the engine wrote is the sandbox's memory: the node's alone.
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chmod(p, 0o600)
	})
}

// checkpointRunning has the engine checkpoint the container id into dir/engineDir and leave it
// running, asking again while the engine fails on what containerd keeps of an earlier
// checkpoint.
//
// The sandbox is left running, and stopped only once its checkpoint is written, because the
// engine can fail after runsc has written the checkpoint and before the engine has kept it:
// containerd 1.6 stores each checkpoint with the container's spec, and refuses the second of
// two checkpoints of one container taken before its garbage collector has removed the first's
// ("content sha256:...: already exists", seen within about two seconds of the first). Asked
// to stop the container with the checkpoint (Exit), the engine then leaves it stopped with
// its checkpoint lost (seen: one time in about twenty when a sandbox was checkpointed,
// restored and checkpointed again at once). What the sandbox does between the checkpoint and
// the kill is lost with it, which a pause that has cut the sandbox's network first makes
// harmless.
func (r *Runtime) checkpointRunning(ctx context.Context, id, dir string) error {
	pause := 100 * time.Millisecond
	for {
		// The engine writes into a directory named by the checkpoint's name (which it allows
		// only in [a-zA-Z0-9_.-]) under the one it is given; the files are moved up after.
		err := r.cli.CheckpointCreate(ctx, id, checkpoint.CreateOptions{CheckpointID: engineDir, CheckpointDir: dir})
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			return err
		}
		emptyDir(dir)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (containerd still held an earlier checkpoint's content when the time ran out)", err)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// Restore starts sb from the checkpoint in dir: a running sb is killed first, the checkpoint's
// files are linked (or copied) into sb's checkpoint directory in the engine's data root for the
// start, and removed after, with the copy containerd leaves (removeExtracted). sb keeps its
// address, and the restore fails when another sandbox took it meanwhile. A sandbox unlike the checkpointed one is
// refused by runsc, naming what differs ("Args" does not match across checkpoint restore...).
func (r *Runtime) Restore(ctx context.Context, sb pool.Sandbox, dir string) (pool.Sandbox, error) {
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		return sb, fmt.Errorf("%w: %s holds no checkpoint: %v", pool.ErrBadRequest, dir, err)
	}
	ins, err := r.cli.ContainerInspect(ctx, sb.ID)
	if err != nil {
		return sb, fmt.Errorf("docker: inspect %s: %w", short(sb.ID), err)
	}
	if err := r.checkpointable(ctx, ins.HostConfig.Runtime); err != nil {
		return sb, fmt.Errorf("sandbox %s: %w", short(sb.ID), err)
	}
	if _, ok := wiredAddr(ins.Config.Labels); ok {
		return sb, fmt.Errorf("sandbox %s: %w: the node wired it into the bridge, and a restore keeps only the engine's endpoints (templates that keep memory stay on the engine's network)", short(sb.ID), pool.ErrCannotCheckpoint)
	}
	info, err := r.cli.Info(ctx)
	if err != nil {
		return sb, fmt.Errorf("docker: info: %w", err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	if ins.State != nil && ins.State.Running {
		if err := r.cli.ContainerKill(cctx, sb.ID, "KILL"); err != nil {
			return sb, fmt.Errorf("docker: stopping %s for the restore: %w", short(sb.ID), err)
		}
	}
	if err := r.waitStopped(cctx, sb.ID); err != nil {
		return sb, err
	}
	r.agents.drop(sb.ID)
	name := "airlock-" + randomHex(8)
	staged := filepath.Join(info.DockerRootDir, "containers", ins.ID, "checkpoints", name)
	nonce, err := stage(dir, staged)
	defer os.RemoveAll(staged)
	if err != nil {
		return sb, fmt.Errorf("restore of %s: staging the checkpoint in the engine's data root: %w", short(sb.ID), err)
	}
	defer removeExtracted(nonce)
	// The restored processes run from the moment it starts, before anything is bound to the
	// sandbox: at its own address, which was no one else's, never at whichever the engine has
	// free (an address a stopped sandbox gave back may still be bound to that sandbox's lease
	// for a moment). A restore that cannot have it fails.
	if !r.keepAddress(cctx, ins.ID, sb.Addr) {
		return sb, fmt.Errorf("docker: restore %s: its address %s was taken meanwhile", short(sb.ID), sb.Addr)
	}
	err = r.cli.ContainerStart(cctx, sb.ID, container.StartOptions{CheckpointID: name})
	if err != nil {
		return sb, fmt.Errorf("docker: restore %s: %w", short(sb.ID), err)
	}
	now, err := r.cli.ContainerInspect(cctx, sb.ID)
	if err != nil {
		return sb, fmt.Errorf("docker: inspect %s: %w", short(sb.ID), err)
	}
	ep := now.NetworkSettings.Networks[r.cfg.Network]
	if ep == nil {
		return sb, fmt.Errorf("docker: restored sandbox %s has no address on %s", short(sb.ID), r.cfg.Network)
	}
	if sb.Addr, err = netip.ParseAddr(ep.IPAddress); err != nil {
		return sb, fmt.Errorf("docker: restored sandbox address %q: %w", ep.IPAddress, err)
	}
	// The agent, when it is the sandbox's main process, came back with it: reattached before
	// the sandbox is handed on, so that its first command finds it serving.
	r.startAgent(ctx, sb, false)
	r.agents.wait(sb.ID, 10*time.Second)
	return sb, nil
}

// checkpointable says why a container run by the engine runtime rt cannot be checkpointed, or
// is nil.
func (r *Runtime) checkpointable(ctx context.Context, rt string) error {
	if rt != "runsc" && !strings.HasPrefix(rt, "runsc-") {
		return fmt.Errorf("%w: it runs under %s; %s", pool.ErrCannotCheckpoint, rt, runcWhy())
	}
	info, err := r.cli.Info(ctx)
	if err != nil {
		return fmt.Errorf("docker: info: %w", err)
	}
	if !info.ExperimentalBuild {
		return fmt.Errorf("%w: %s", pool.ErrCannotCheckpoint, noExperimental)
	}
	return nil
}

// waitStopped waits until the container is not running (at once when it is not).
func (r *Runtime) waitStopped(ctx context.Context, id string) error {
	waited, errs := r.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case <-waited:
		return nil
	case err := <-errs:
		return fmt.Errorf("docker: waiting for %s to stop: %w", short(id), err)
	}
}

// keepAddress asks that the stopped container id get addr again when it starts, unless addr is
// invalid or another container holds it, and reports whether it asked. The engine gives a
// stopped container's address back to its pool, so without this a restored sandbox gets
// whichever is free first.
func (r *Runtime) keepAddress(ctx context.Context, id string, addr netip.Addr) bool {
	// Only the engine's half: an address in the node's may be a wired sandbox's, which the
	// engine does not know of (and would hand out twice).
	if engine, _, _ := halves(r.cfg.Subnet); !addr.IsValid() || !engine.Contains(addr) {
		return false
	}
	n, err := r.cli.NetworkInspect(ctx, r.cfg.Network, network.InspectOptions{})
	if err != nil {
		return false
	}
	for cid, ep := range n.Containers {
		if held, err := netip.ParsePrefix(ep.IPv4Address); err == nil && held.Addr() == addr && cid != id {
			return false
		}
	}
	return r.reconnect(ctx, id, addr) == nil
}

// reconnect connects the stopped container id to the sandbox network anew, asking for addr
// when it is valid, for any address when it fails or is not. The container is never left off
// the network unless the engine refuses both.
func (r *Runtime) reconnect(ctx context.Context, id string, addr netip.Addr) error {
	if err := r.cli.NetworkDisconnect(ctx, r.cfg.Network, id, true); err != nil {
		return fmt.Errorf("docker: disconnect %s: %w", short(id), err)
	}
	if addr.IsValid() {
		err := r.cli.NetworkConnect(ctx, r.cfg.Network, id, &network.EndpointSettings{
			IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr.String()}})
		if err == nil {
			return nil
		}
	}
	if err := r.cli.NetworkConnect(ctx, r.cfg.Network, id, &network.EndpointSettings{}); err != nil {
		return fmt.Errorf("docker: connect %s: %w", short(id), err)
	}
	if addr.IsValid() {
		return fmt.Errorf("docker: %s could not have %s again", short(id), addr)
	}
	return nil
}

// moveUp moves the files in sub into its parent and removes sub.
func moveUp(sub string) error {
	ents, err := os.ReadDir(sub)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(sub, e.Name()), filepath.Join(filepath.Dir(sub), e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(sub)
}

// emptyDir removes what dir holds.
func emptyDir(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// stage makes dst hold the regular files of the checkpoint in src, hard-linked where they are
// on the same file system (a restore then copies nothing of its own) and copied where not,
// plus nonceFile, whose content it returns.
func stage(src, dst string) (nonce string, err error) {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return "", err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || e.Name() == nonceFile {
			continue
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if os.Link(from, to) == nil {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return "", err
		}
	}
	nonce = randomHex(16)
	return nonce, os.WriteFile(filepath.Join(dst, nonceFile), []byte(nonce), 0o600)
}

// removeExtracted removes the copy of a restore's checkpoint that containerd extracts into a
// temporary directory and leaves there (containerd 1.6: one /tmp/ctrd-checkpoint* per restore,
// the sandbox's memory in the clear, never removed), found by the nonce staged with it. It
// looks where containerd makes it: $XDG_RUNTIME_DIR, else the temporary directory, which it
// takes to be the node's.
func removeExtracted(nonce string) {
	seen := map[string]bool{}
	for _, d := range []string{os.Getenv("XDG_RUNTIME_DIR"), os.TempDir(), "/tmp"} {
		if d == "" || seen[d] {
			continue
		}
		seen[d] = true
		found, _ := filepath.Glob(filepath.Join(d, "ctrd-checkpoint*"))
		for _, f := range found {
			if b, err := os.ReadFile(filepath.Join(f, nonceFile)); err == nil && string(b) == nonce {
				os.RemoveAll(f)
			}
		}
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// runcWhy says why a runc sandbox cannot be checkpointed on this node, probed once per
// process: CRIU missing, CRIU failing its own check on this kernel, CRIU unable to read the
// sandbox processes' limits without CAP_SYS_RESOURCE, or, with all of that in place, that
// airlock does not checkpoint runc sandboxes.
func runcWhy() string {
	runcVerdict.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runcVerdict.why = "runc: " + probeCRIU(ctx, "criu", "/proc/self/status") +
			"; templates with runtime runsc (gVisor) and snapshot.memory keep memory across a pause"
	})
	return runcVerdict.why
}

var runcVerdict struct {
	once sync.Once
	why  string
}

// probeCRIU says what stops runc checkpoints here, asking the CRIU named criu and reading the
// capability bounding set from status (a /proc/PID/status).
func probeCRIU(ctx context.Context, criu, status string) string {
	path, err := exec.LookPath(criu)
	if err != nil {
		return "memory checkpoints of runc sandboxes need CRIU, which this node does not have"
	}
	out, err := exec.CommandContext(ctx, path, "check").CombinedOutput()
	if err != nil {
		why := fmt.Sprintf("CRIU fails its own check on this node: `criu check` says %q", firstError(out, err))
		if bytes.Contains(out, []byte("Unexpected rt vDSO area bounds")) {
			why += " (CRIU reads the vDSO layout of Linux 6.13 and later only from version 4.1 on)"
		}
		return why
	}
	if !boundingHas(status, capSysResource) {
		return "CRIU cannot dump a sandbox here: the sandbox's processes run as their own user, and reading their resource " +
			"limits needs CAP_SYS_RESOURCE, which this host withholds from every process (its capability bounding set); " +
			"CRIU stops with \"Can't get rlimit 0: Operation not permitted\""
	}
	return "airlock does not checkpoint runc sandboxes (CRIU passes its check on this node, but no test here has shown a sandbox restored)"
}

// capSysResource is CAP_SYS_RESOURCE's bit in a capability set.
const capSysResource = 24

// firstError is the first line of CRIU's output that reports an error, else err.
func firstError(out []byte, err error) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.Contains(l, "Error") {
			return l
		}
	}
	return err.Error()
}

// boundingHas reports whether the capability bounding set in status (a /proc/PID/status) holds
// capability bit; a status it cannot read counts as holding it.
func boundingHas(status string, bit uint) bool {
	b, err := os.ReadFile(status)
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err != nil || set&(1<<bit) != 0
		}
	}
	return true
}
