package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
)

// These tests run sandboxes on the local engine (DOCKER_HOST or the default socket), from the
// image airlock/default, as `make test` has them (scripts/deps.sh starts the engine, `make
// runsc` registers gVisor, `make image` builds the image); without an engine or the image they
// are skipped, saying so, and so are gVisor's when the engine cannot checkpoint
// (CanCheckpoint's reason).

const (
	testImage   = "airlock/default:latest"
	testNetwork = "airlock-ckpt-test"
	testBridge  = "airlock-ckpt"
)

var testSubnet = netip.MustParsePrefix("10.230.0.0/24")

// testTemplate is a small template of runtime rt ("runc", "runsc", "runsc-ptrace").
func testTemplate(rt string) pool.Template {
	t := pool.Template{Name: "ckpt-" + rt, Image: testImage, User: "10001:10001", Workdir: "/workspace",
		CPUs: 1, MemoryMB: 512, Pids: 256, WorkspaceMB: 64, TmpMB: 16, NoFile: 4096, NProc: 4096, Runtime: rt}
	if rt, platform, ok := strings.Cut(rt, "-"); ok {
		t.Runtime, t.Platform = rt, platform
	}
	return t
}

// testRuntime is a Runtime on a sandbox network of its own, with this test binary as the exec
// agent (it imports package agent), or skips the test when no engine or image is here.
func testRuntime(t testing.TB) *Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := NewClient()
	if err != nil {
		t.Skip("no Docker client:", err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		t.Skip("no Docker engine answers (scripts/deps.sh starts one):", err)
	}
	if _, err := cli.ImageInspect(ctx, testImage); err != nil {
		t.Skipf("no image %s on the engine (`make image` builds it): %v", testImage, err)
	}
	dir := t.TempDir()
	for _, f := range []string{"ca-bundle.pem", "ca-truststore.p12", "resolv.conf"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("# test\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runtime{cli: cli, gw: testSubnet.Addr().Next(), cfg: Config{
		Node: "ckpt-test", Network: testNetwork, Bridge: testBridge, Subnet: testSubnet,
		ProxyURL: "http://10.230.0.1:3128", CABundle: filepath.Join(dir, "ca-bundle.pem"),
		TrustStore: filepath.Join(dir, "ca-truststore.p12"), ResolvConf: filepath.Join(dir, "resolv.conf"), Agent: SelfAgent(),
	}}
	if err := r.EnsureNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	// Another run of these tests may still use the network: then it stays for that one.
	t.Cleanup(func() { r.RemoveNetwork(context.Background()) })
	return r
}

// engineNetworked is testRuntime with gVisor's sandboxes on the engine's network, as a template
// whose pauses keep memory has them: these tests checkpoint and restore sandboxes of templates
// that do not (which the pool never does), and a restore keeps only the engine's endpoints.
func engineNetworked(tb testing.TB) *Runtime {
	r := testRuntime(tb)
	r.wrapped = nil
	return r
}

// canCheckpoint skips the test, with the reason, when t's sandboxes cannot be checkpointed.
func canCheckpoint(tb testing.TB, r *Runtime, t pool.Template) {
	tb.Helper()
	if ok, why := r.CanCheckpoint(context.Background(), t); !ok {
		tb.Skip("cannot checkpoint here:", why)
	}
}

// newSandbox makes a sandbox of t, destroyed when the test ends.
func newSandbox(tb testing.TB, r *Runtime, t pool.Template) pool.Sandbox {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := r.Create(ctx, t)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Destroy(context.Background(), sb.ID) })
	return sb
}

// withMain makes a sandbox like sb (the same hardening, copied from the engine's record of sb)
// whose main process, under Docker's init, is argv instead of sleep, with env added and stdin
// open when attach is set. Processes meant to survive a restore must descend from the main
// process, as this one's do.
func withMain(tb testing.TB, r *Runtime, sb pool.Sandbox, argv, env []string, attach bool) pool.Sandbox {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ins, err := r.cli.ContainerInspect(ctx, sb.ID)
	if err != nil {
		tb.Fatal(err)
	}
	cc, hc := ins.Config, ins.HostConfig
	cc.Entrypoint, cc.Cmd = argv[:1], argv[1:]
	cc.Env = append(cc.Env, env...)
	cc.Hostname = ""
	if attach {
		cc.OpenStdin, cc.AttachStdin, cc.AttachStdout, cc.AttachStderr, cc.StdinOnce = true, true, true, true, false
		// What the main process writes is the node's commands' output: no log keeps it.
		hc.LogConfig = container.LogConfig{Type: "none"}
	}
	created, err := r.cli.ContainerCreate(ctx, cc, hc, nil, nil, "")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Destroy(context.Background(), created.ID) })
	if err := r.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		tb.Fatal(err)
	}
	now, err := r.cli.ContainerInspect(ctx, created.ID)
	if err != nil {
		tb.Fatal(err)
	}
	addr, _ := netip.ParseAddr(now.NetworkSettings.Networks[r.cfg.Network].IPAddress)
	return pool.Sandbox{ID: created.ID, Template: sb.Template, Node: sb.Node, Addr: addr, Created: time.Now()}
}

// counter is a main process that keeps its state in memory: a nonce it drew at start and a
// count, written with its pid to /workspace/state every 20 ms. A restarted process would
// draw another nonce and count from 1.
var counter = []string{"python3", "-c", `import os, time
nonce = os.urandom(8).hex()
i = 0
while True:
    i += 1
    with open("/workspace/state.tmp", "w") as f:
        f.write("%d %s %d\n" % (os.getpid(), nonce, i))
    os.rename("/workspace/state.tmp", "/workspace/state")
    time.sleep(0.02)
`}

type counterState struct {
	pid, count int
	nonce      string
}

// runIn runs cmd in sb and returns its standard output, failing the test unless it exits 0.
func runIn(tb testing.TB, r *Runtime, sb pool.Sandbox, cmd ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errs bytes.Buffer
	code, err := r.Exec(ctx, sb, pool.ExecRequest{Cmd: cmd}, nil, &out, &errs)
	if err != nil || code != 0 {
		tb.Fatalf("%q in %s: exit %d, %v: %s", cmd, short(sb.ID), code, err, errs.String())
	}
	return out.String()
}

// readCounter reads the counter's state in sb; ok is false while it has written none.
func readCounter(tb testing.TB, r *Runtime, sb pool.Sandbox) (s counterState, ok bool) {
	tb.Helper()
	out := runIn(tb, r, sb, "sh", "-c", "cat /workspace/state 2>/dev/null || true")
	if out == "" {
		return s, false
	}
	if _, err := fmt.Sscan(out, &s.pid, &s.nonce, &s.count); err != nil {
		tb.Fatalf("the counter's state %q: %v", out, err)
	}
	return s, true
}

// counting waits until sb's counter has counted past after, and returns its state.
func counting(tb testing.TB, r *Runtime, sb pool.Sandbox, after int) counterState {
	tb.Helper()
	var s counterState
	wait.For(tb, 30*time.Second, fmt.Sprintf("the counter in %s to count past %d", short(sb.ID), after), func() bool {
		var ok bool
		s, ok = readCounter(tb, r, sb)
		return ok && s.count > after
	})
	return s
}

// hostProcesses lists the host's processes whose command line names the container id: under
// gVisor its sandbox, gofer and shim.
func hostProcesses(id string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(id)) {
			found = append(found, e.Name()+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return found
}

// assertStopped fails the test unless sb's container is stopped and none of its processes
// runs on the host.
func assertStopped(tb testing.TB, r *Runtime, sb pool.Sandbox) {
	tb.Helper()
	ins, err := r.cli.ContainerInspect(context.Background(), sb.ID)
	if err != nil {
		tb.Fatal(err)
	}
	if ins.State.Running || ins.State.Pid != 0 {
		tb.Fatalf("after the checkpoint the container is %s with pid %d", ins.State.Status, ins.State.Pid)
	}
	if err := wait.Until(10*time.Second, "the sandbox's host processes to end", func() bool { return len(hostProcesses(sb.ID)) == 0 }); err != nil {
		tb.Fatalf("%v: %s", err, strings.Join(hostProcesses(sb.ID), "\n"))
	}
}

// TestCheckpointKeepsTheMainProcess: under each of gVisor's platforms, a checkpoint stops the
// sandbox (no process of it left on the host), and the restore brings back the same process
// with its memory (its nonce, its count going on from where it was, its pid), the tmpfs
// workspace and /tmp with what was written there, and the sandbox's address.
func TestCheckpointKeepsTheMainProcess(t *testing.T) {
	r := engineNetworked(t)
	for _, rt := range []string{"runsc", "runsc-ptrace"} {
		t.Run(rt, func(t *testing.T) {
			tmpl := testTemplate(rt)
			canCheckpoint(t, r, tmpl)
			sb := withMain(t, r, newSandbox(t, r, tmpl), counter, nil, false)
			before := counting(t, r, sb, 5)
			runIn(t, r, sb, "sh", "-c", "echo kept > /workspace/note && echo kept too > /tmp/note")

			dir := filepath.Join(t.TempDir(), "checkpoint")
			ctx := context.Background()
			if err := r.Checkpoint(ctx, sb, dir); err != nil {
				t.Fatal(err)
			}
			assertStopped(t, r, sb)
			if fi, err := os.Stat(filepath.Join(dir, stateFile)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("the checkpoint's state file: %v, %v (want mode 0600)", fi, err)
			}

			restored, err := r.Restore(ctx, sb, dir)
			if err != nil {
				t.Fatal(err)
			}
			first, ok := readCounter(t, r, restored)
			if !ok {
				t.Fatal("the counter's state is gone after the restore")
			}
			after := counting(t, r, restored, first.count)
			if after.nonce != before.nonce || after.pid != before.pid || first.count < before.count {
				t.Fatalf("the counter was not kept: before %+v, first after %+v, then %+v", before, first, after)
			}
			if got := runIn(t, r, restored, "cat", "/workspace/note", "/tmp/note"); got != "kept\nkept too\n" {
				t.Errorf("the tmpfs files after the restore: %q", got)
			}
			if restored.Addr != sb.Addr {
				t.Errorf("the sandbox had %s, and %s after the restore", sb.Addr, restored.Addr)
			}
			if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
				t.Errorf("the restore did not leave the checkpoint as it was: %v", err)
			}
		})
	}
}

// TestCheckpointAgainAtOnce: a sandbox checkpointed again right after its restore, over and
// over, is never lost. containerd refuses such a checkpoint now and then (it still holds the
// first one's content), after runsc has written it: a checkpoint that stopped the sandbox with
// it would leave it stopped with nothing kept (seen once in about twenty rounds).
func TestCheckpointAgainAtOnce(t *testing.T) {
	r := engineNetworked(t)
	tmpl := testTemplate("runsc")
	canCheckpoint(t, r, tmpl)
	sb := newSandbox(t, r, tmpl)
	runIn(t, r, sb, "sh", "-c", "echo 0 > /workspace/rounds")
	const rounds = 20
	for i := 1; i <= rounds; i++ {
		dir := filepath.Join(t.TempDir(), "checkpoint")
		if err := r.Checkpoint(context.Background(), sb, dir); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		var err error
		if sb, err = r.Restore(context.Background(), sb, dir); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		runIn(t, r, sb, "sh", "-c", "echo $(($(cat /workspace/rounds) + 1)) > /workspace/rounds")
	}
	if got := runIn(t, r, sb, "cat", "/workspace/rounds"); got != strconv.Itoa(rounds)+"\n" {
		t.Fatalf("after %d rounds the workspace counts %q", rounds, got)
	}
}

// TestNoCopyLeftOnTheHost: after a checkpoint and a restore, the checkpoint (the sandbox's
// memory, in the clear) is on the host only in the directory it was written to: neither in
// the engine's data root nor in what containerd extracts into its temporary directory and,
// left alone, never removes.
func TestNoCopyLeftOnTheHost(t *testing.T) {
	r := engineNetworked(t)
	tmpl := testTemplate("runsc")
	canCheckpoint(t, r, tmpl)
	sb := newSandbox(t, r, tmpl)
	start := time.Now()
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := r.Checkpoint(context.Background(), sb, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Restore(context.Background(), sb, dir); err != nil {
		t.Fatal(err)
	}
	info, err := r.cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	staged, _ := filepath.Glob(filepath.Join(info.DockerRootDir, "containers", sb.ID, "checkpoints", "*"))
	var extracted []string
	for _, pattern := range []string{"ctrd-checkpoint*", "ctd-checkpoint*"} {
		found, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern))
		for _, f := range found {
			if fi, err := os.Stat(f); err == nil && !fi.ModTime().Before(start) {
				extracted = append(extracted, f)
			}
		}
	}
	if len(staged) > 0 || len(extracted) > 0 {
		t.Fatalf("copies of the checkpoint left on the host: in the engine's data root %q, in the temporary directory %q", staged, extracted)
	}
}

// TestRestoreEndsExecSessions: what an exec started (every command of a sandbox made by Create
// today) does not come back, as runsc ends exec'd processes when it restores; the files it
// wrote do, and the sandbox runs commands again.
func TestRestoreEndsExecSessions(t *testing.T) {
	r := engineNetworked(t)
	tmpl := testTemplate("runsc")
	canCheckpoint(t, r, tmpl)
	sb := newSandbox(t, r, tmpl)
	runIn(t, r, sb, "sh", "-c", "echo written > /workspace/file; setsid sleep 1000 </dev/null >/dev/null 2>&1 &")
	if ps := runIn(t, r, sb, "ps", "-eo", "args"); !strings.Contains(ps, "sleep 1000") {
		t.Fatalf("the background process did not start:\n%s", ps)
	}
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := r.Checkpoint(context.Background(), sb, dir); err != nil {
		t.Fatal(err)
	}
	restored, err := r.Restore(context.Background(), sb, dir)
	if err != nil {
		t.Fatal(err)
	}
	ps := runIn(t, r, restored, "ps", "-eo", "args")
	if strings.Contains(ps, "sleep 1000") || !strings.Contains(ps, "sleep infinity") {
		t.Errorf("after the restore, want the main process (sleep infinity) and not the exec'd one (sleep 1000):\n%s", ps)
	}
	if got := runIn(t, r, restored, "cat", "/workspace/file"); got != "written\n" {
		t.Errorf("the workspace after the restore: %q", got)
	}
}

// TestRestoreElsewhere: a checkpoint archived and unpacked at another path seeds other
// sandboxes of the same template, running ones too (each is stopped first), any number of
// times: each then runs the checkpointed process, with its memory, and keeps its own address.
func TestRestoreElsewhere(t *testing.T) {
	r := engineNetworked(t)
	tmpl := testTemplate("runsc")
	canCheckpoint(t, r, tmpl)
	a := withMain(t, r, newSandbox(t, r, tmpl), counter, nil, false)
	before := counting(t, r, a, 5)
	dir := filepath.Join(t.TempDir(), "a")
	if err := r.Checkpoint(context.Background(), a, dir); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "moved")
	untar(t, tarDir(t, dir), moved)
	for _, name := range []string{"b", "c"} {
		// The same main process as a's: gVisor restores only into the command line it saved.
		other := withMain(t, r, newSandbox(t, r, tmpl), counter, nil, false)
		own := counting(t, r, other, 0)
		restored, err := r.Restore(context.Background(), other, moved)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := counting(t, r, restored, before.count)
		if got.nonce != before.nonce || got.nonce == own.nonce {
			t.Errorf("%s runs %+v after the restore; the checkpointed counter was %+v, its own %+v", name, got, before, own)
		}
		if restored.Addr != other.Addr {
			t.Errorf("%s had %s, and %s after the restore", name, other.Addr, restored.Addr)
		}
	}
}

// TestMemoryTemplateKeepsWhatItsCommandsStarted: a template whose pauses keep memory
// (snapshot.memory) runs its exec agent as the sandbox's main process, so what a command
// started in the background (through Exec, as a lease's commands are) comes back with its
// memory after a checkpoint, restored into the same sandbox and into another warm one of the
// template; the agent is reattached and serves at once, and a command still running from before
// the restore does not take the new connection's ids. A template without it loses the process.
func TestMemoryTemplateKeepsWhatItsCommandsStarted(t *testing.T) {
	r := testRuntime(t)
	if r.cfg.Agent == "" {
		t.Skip("no agent executable")
	}
	tmpl := testTemplate("runsc")
	tmpl.Snapshot.Memory = true
	canCheckpoint(t, r, tmpl)
	sb := newSandbox(t, r, tmpl)
	wait.For(t, 30*time.Second, "the sandbox's main-process agent to serve", func() bool {
		c := r.agents.get(sb.ID)
		return c != nil && c.Alive()
	})
	loop := "i=0; n=$RANDOM$RANDOM; while :; do i=$((i+1)); echo \"$$ $n $i\" > /workspace/state.tmp; mv /workspace/state.tmp /workspace/state; sleep 0.02; done"
	// Started by Exec and left running; another command still runs through the agent at the
	// checkpoint, under an id the restored agent keeps.
	if got := runIn(t, r, sb, "bash", "-c", "setsid bash -c '"+loop+"' </dev/null >/dev/null 2>&1 & echo started"); got != "started\n" {
		t.Fatalf("starting the background loop: %q", got)
	}
	go r.Exec(context.Background(), sb, pool.ExecRequest{Cmd: []string{"sleep", "600"}}, nil, io.Discard, io.Discard)
	before := counting(t, r, sb, 5)
	// Made first: one made after the checkpoint may be given the address sb gave back, and
	// sb's restore then fails, as it must, rather than run elsewhere.
	other := newSandbox(t, r, tmpl)
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := r.Checkpoint(context.Background(), sb, dir); err != nil {
		t.Fatal(err)
	}
	for name, into := range map[string]pool.Sandbox{"itself": sb, "another warm sandbox": other} {
		restored, err := r.Restore(context.Background(), into, dir)
		if err != nil {
			t.Fatalf("restoring into %s: %v", name, err)
		}
		if c := r.agents.get(restored.ID); c == nil || !c.Alive() {
			t.Fatalf("restored into %s, the agent is not reattached when Restore returns", name)
		}
		after := counting(t, r, restored, before.count)
		if after.pid != before.pid || after.nonce != before.nonce {
			t.Fatalf("restored into %s, the background process did not come back: before %+v, after %+v", name, before, after)
		}
		for i := range 20 { // more commands than the one the agent still runs from before
			if got := runIn(t, r, restored, "echo", strconv.Itoa(i)); got != strconv.Itoa(i)+"\n" {
				t.Fatalf("restored into %s, command %d through the reattached agent printed %q", name, i, got)
			}
		}
		if got := runIn(t, r, restored, "sh", "-c", "ps -eo args | grep -c '^sleep 600'"); got != "1\n" {
			t.Errorf("restored into %s, the command running at the checkpoint: %q sleep 600 processes", name, got)
		}
	}

	// A plain gVisor sandbox is checkpointed only here, to show what it loses: on the engine's
	// network, since one the node wired is not checkpointed at all.
	r.wrapped = nil
	plain := testTemplate("runsc")
	sbPlain := newSandbox(t, r, plain)
	if got := runIn(t, r, sbPlain, "bash", "-c", "setsid bash -c '"+loop+"' </dev/null >/dev/null 2>&1 & echo started"); got != "started\n" {
		t.Fatalf("starting the background loop: %q", got)
	}
	counting(t, r, sbPlain, 5)
	plainDir := filepath.Join(t.TempDir(), "plain")
	if err := r.Checkpoint(context.Background(), sbPlain, plainDir); err != nil {
		t.Fatal(err)
	}
	back, err := r.Restore(context.Background(), sbPlain, plainDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := runIn(t, r, back, "sh", "-c", "ps -eo args | grep -c '[w]hile :' || true"); got != "0\n" {
		t.Errorf("a template without snapshot.memory kept what an exec started (%q processes): the test no longer shows why the option exists", got)
	}
}

// TestCanCheckpointSaysWhyNot: a runc template cannot be checkpointed and the answer says why,
// naming CRIU; a checkpoint of a runc sandbox is refused with ErrCannotCheckpoint and leaves
// it running.
func TestCanCheckpointSaysWhyNot(t *testing.T) {
	r := testRuntime(t)
	tmpl := testTemplate("runc")
	ok, why := r.CanCheckpoint(context.Background(), tmpl)
	if ok || !strings.HasPrefix(why, "runc: ") || !strings.Contains(why, "CRIU") {
		t.Fatalf("CanCheckpoint(runc) = %v, %q", ok, why)
	}
	sb := newSandbox(t, r, tmpl)
	err := r.Checkpoint(context.Background(), sb, filepath.Join(t.TempDir(), "checkpoint"))
	if !errors.Is(err, pool.ErrCannotCheckpoint) || !strings.Contains(err.Error(), why) {
		t.Fatalf("checkpoint of a runc sandbox: %v", err)
	}
	if got := runIn(t, r, sb, "echo", "running"); got != "running\n" {
		t.Fatalf("the runc sandbox after the refused checkpoint: %q", got)
	}
}

// TestProbeCRIUSaysWhatStopsIt: each thing that stops runc checkpoints on a node is named: no
// CRIU, a CRIU that fails its own check on this kernel (the vDSO error of CRIU 3.17 on Linux
// 6.13 and later, seen here), and no CAP_SYS_RESOURCE in the host's bounding set (seen here
// with CRIU 4.2).
func TestProbeCRIUSaysWhatStopsIt(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	status := func(name, capBnd string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("Name:\tx\nCapEff:\t0000000000000000\nCapBnd:\t"+capBnd+"\n"), 0o644)
		return p
	}
	vdso := script("criu-vdso", "echo 'Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds' >&2\n"+
		"echo 'Error (criu/crtools.c:260): Could not initialize kernel features detection.' >&2\nexit 1\n")
	good := script("criu-good", "echo 'Looks good.'\n")
	without, with := status("without", "000001fffeffffff"), status("with", "000001ffffffffff")
	for _, c := range []struct {
		name, criu, status, want string
	}{
		{"no CRIU", filepath.Join(dir, "absent"), with, "need CRIU, which this node does not have"},
		{"CRIU fails its check", vdso, with, `"Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds" (CRIU reads the vDSO layout of Linux 6.13 and later only from version 4.1 on)`},
		{"no CAP_SYS_RESOURCE", good, without, "needs CAP_SYS_RESOURCE, which this host withholds"},
		{"nothing stops CRIU", good, with, "airlock does not checkpoint runc sandboxes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := probeCRIU(context.Background(), c.criu, c.status); !strings.Contains(got, c.want) {
				t.Errorf("probeCRIU = %q, want it to say %q", got, c.want)
			}
		})
	}
}

// tarDir archives dir's files as the snapshot package would before it encrypts them.
func tarDir(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func untar(t *testing.T, b []byte, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(dir, filepath.Base(h.Name)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}
