package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/docker/agent"
	"github.com/airlock-dev/airlock/pool/inside"
)

// Labels every container and network carries.
const (
	LabelManaged  = "dev.airlock.managed"
	LabelNode     = "dev.airlock.node"
	LabelTemplate = "dev.airlock.template"
	// LabelCheck marks a container, never started, through which an image's files are read.
	LabelCheck = "dev.airlock.check"
)

// Config describes the node's sandbox network and what every sandbox is given.
type Config struct {
	Node string
	// Network is the internal Docker network's name; Bridge its host interface name (at most 15
	// characters); Subnet is pinned so the host address is known before the network exists.
	Network string
	Bridge  string
	Subnet  netip.Prefix
	// ProxyURL is the gateway as sandboxes reach it, e.g. "http://10.213.0.1:3128".
	ProxyURL string
	// CABundle is a host file: the system roots plus the deployment CA, mounted read-only over
	// the image's bundle. ResolvConf names the resolver directly.
	CABundle string
	// TrustStore is a host file: the same roots as a PKCS#12 trust store, mounted read-only.
	TrustStore string
	ResolvConf string
	// Agent is a host executable that serves as the sandbox's exec agent (any binary importing
	// package agent; SelfAgent is this one), mounted read-only into every sandbox; empty means
	// every command is an engine exec.
	Agent string
}

// Runtime implements pool.Runtime with Docker. Safe for concurrent use.
type Runtime struct {
	cfg    Config
	cli    *client.Client
	gw     netip.Addr
	checks checked
	agents agents
	addrs  addrs // the node's half of the subnet (wire.go)
	// wrapped names the engine's runtimes that are airlock's runsc wrapper (readEngine).
	wrapped map[string]bool
}

var (
	_ pool.Runtime      = (*Runtime)(nil)
	_ pool.ImageBuilder = (*Runtime)(nil)
)

// New connects to the engine (DOCKER_HOST or the default socket).
func New(cfg Config) (*Runtime, error) {
	cli, err := NewClient()
	if err != nil {
		return nil, err
	}
	return &Runtime{cfg: cfg, cli: cli, gw: cfg.Subnet.Addr().Next()}, nil
}

// NewClient connects to the engine (DOCKER_HOST or the default socket).
func NewClient() (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	return cli, nil
}

// BuildMissing builds t's image (BuildTemplate) when t is built from a Dockerfile or
// devcontainer.json and the engine lacks it, writing progress to w; it reports whether it built.
func (r *Runtime) BuildMissing(ctx context.Context, t pool.Template, w io.Writer) (bool, error) {
	if !t.Built() {
		return false, nil
	}
	if _, err := r.cli.ImageInspect(ctx, t.Image); err == nil {
		return false, nil
	} else if !errdefs.IsNotFound(err) {
		return false, fmt.Errorf("docker: inspect %s: %w", t.Image, err)
	}
	_, err := BuildTemplate(ctx, r.cli, t, w)
	return err == nil, err
}

// HostAddr is the host's address on the sandbox network: where the gateway and resolver listen.
func (r *Runtime) HostAddr() netip.Addr { return r.gw }

// EngineRuntimes are the OCI runtimes the engine can run containers with, each with the
// arguments the engine passes it.
func (r *Runtime) EngineRuntimes(ctx context.Context) (map[string][]string, error) {
	info, err := r.cli.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker: info: %w", err)
	}
	return RuntimesOf(info), nil
}

// RuntimesOf lists the runtimes an engine's info names, each with its arguments.
func RuntimesOf(info system.Info) map[string][]string {
	out := make(map[string][]string, len(info.Runtimes))
	for name, rt := range info.Runtimes {
		out[name] = rt.Args
	}
	return out
}

// CannotRun says why an engine with runtimes (EngineRuntimes) cannot run t's sandboxes, or is
// nil: the engine lacks t's runtime, or runs gVisor on a platform other than the one t names.
func CannotRun(runtimes map[string][]string, t pool.Template) error {
	name := t.EngineRuntime()
	rt, platform := t.RuntimePlatform()
	args, ok := runtimes[name]
	if !ok {
		have := slices.Sorted(maps.Keys(runtimes))
		what := "the " + name + " runtime"
		if platform != "" {
			what = fmt.Sprintf("%s on gVisor's %s platform (the engine runtime %s)", rt, platform, name)
		}
		return fmt.Errorf("template %s asks for %s, which this engine does not have (it has %s)%s",
			t.Name, what, strings.Join(have, ", "), installHint(rt, platform))
	}
	if platform == "" {
		return nil
	}
	// gVisor runs on systrap when no --platform is given.
	got := pool.Platforms[0]
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--platform="); ok {
			got = v
		} else if a == "--platform" && i+1 < len(args) {
			got = args[i+1] // the same flag, its value as the next argument
		}
	}
	if got != platform {
		return fmt.Errorf("template %s asks for gVisor's %s platform, but the engine runs its %s runtime on %s (runtimeArgs %q)%s",
			t.Name, platform, name, got, args, installHint(rt, platform))
	}
	return nil
}

func installHint(rt, platform string) string {
	if rt == "crun" {
		return ": `make deps` (scripts/deps.sh) installs Debian's crun and registers it with the engine (scripts/crun.sh)"
	}
	if rt != "runsc" {
		return ""
	}
	hint := ": `make runsc` (scripts/runsc.sh) builds gVisor's runsc and registers it with the engine"
	if platform != pool.Platforms[0] {
		hint += fmt.Sprintf(" on the platforms RUNSC_PLATFORMS names (systrap and ptrace unless it is set; add %s: RUNSC_PLATFORMS=\"systrap ptrace %s\" make runsc)", platform, platform)
	}
	return hint
}

// Ping checks that the engine answers.
func (r *Runtime) Ping(ctx context.Context) error {
	_, err := r.cli.Ping(ctx)
	if err != nil {
		return fmt.Errorf("docker engine not reachable: %w", err)
	}
	return nil
}

// EnsureNetwork creates the internal sandbox network (no outside route, inter-container traffic
// off) unless it exists with the same settings; a stale one from an earlier run is replaced.
func (r *Runtime) EnsureNetwork(ctx context.Context) error {
	if err := r.readEngine(ctx); err != nil {
		return err
	}
	if err := r.sweepNS(ctx); err != nil {
		return err
	}
	// The engine gives out addresses from the subnet's lower half only; the upper half is the
	// node's, for the sandboxes it wires itself (wire.go).
	engine, _, _ := halves(r.cfg.Subnet)
	nets, err := r.cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", r.cfg.Network))})
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	for _, n := range nets {
		if n.Name != r.cfg.Network {
			continue
		}
		if n.Internal && n.Options["com.docker.network.bridge.enable_icc"] == "false" && n.Options["com.docker.network.bridge.name"] == r.cfg.Bridge &&
			len(n.IPAM.Config) == 1 && n.IPAM.Config[0].Subnet == r.cfg.Subnet.String() && n.IPAM.Config[0].IPRange == engine.String() {
			return nil
		}
		if err := r.noneWired(ctx, fmt.Sprintf("network %s is not as configured (subnet %s, bridge %s)", n.Name, r.cfg.Subnet, r.cfg.Bridge), "replaced"); err != nil {
			return err
		}
		if err := r.cli.NetworkRemove(ctx, n.ID); err != nil {
			return fmt.Errorf("docker: replacing network %s: %w", n.Name, err)
		}
	}
	// A network missing under wired sandboxes was removed behind the node's back (the engine
	// does not know they are on it): their ports are off any bridge, and a new one would not
	// have them.
	if !slices.ContainsFunc(nets, func(n network.Summary) bool { return n.Name == r.cfg.Network }) {
		if err := r.noneWired(ctx, fmt.Sprintf("network %s is gone", r.cfg.Network), "made anew"); err != nil {
			return err
		}
	}
	_, err = r.cli.NetworkCreate(ctx, r.cfg.Network, network.CreateOptions{
		Driver:   "bridge",
		Internal: true,
		IPAM: &network.IPAM{Config: []network.IPAMConfig{{
			Subnet: r.cfg.Subnet.String(), IPRange: engine.String(), Gateway: r.gw.String(),
		}}},
		Options: map[string]string{
			"com.docker.network.bridge.enable_icc": "false",
			"com.docker.network.bridge.name":       r.cfg.Bridge,
		},
		Labels: map[string]string{LabelManaged: "true", LabelNode: r.cfg.Node},
	})
	if err != nil {
		return fmt.Errorf("docker: creating network %s: %w", r.cfg.Network, err)
	}
	return nil
}

// RemoveNetwork removes the sandbox network; call it after every sandbox is destroyed.
func (r *Runtime) RemoveNetwork(ctx context.Context) error {
	if err := r.noneWired(ctx, "network "+r.cfg.Network+" is to be removed", "removed"); err != nil {
		return err
	}
	err := r.cli.NetworkRemove(ctx, r.cfg.Network)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("docker: %w", err)
	}
	return nil
}

// noneWired refuses, saying why and what to do, while sandboxes the node wired into the bridge
// exist: the engine refuses to remove a network its endpoints are on, but the node's sandboxes
// are not its endpoints, and their ports would be left off any bridge.
func (r *Runtime) noneWired(ctx context.Context, why, done string) error {
	cs, err := r.containers(ctx)
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(cs, func(c container.Summary) bool { _, ok := wiredAddr(c.Labels); return ok }); i >= 0 {
		return fmt.Errorf("docker: %s, and sandboxes the node wired into its bridge are on it (%s among them): destroy them before it is %s",
			why, short(cs[i].ID), done)
	}
	return nil
}

// Create starts a hardened sandbox: wired by the node at an address of its own (wire.go),
// or, under gVisor, on the engine's network.
func (r *Runtime) Create(ctx context.Context, t pool.Template) (pool.Sandbox, error) {
	if !r.wires(t) {
		return r.create(ctx, t, netip.Addr{})
	}
	addr, err := r.take(ctx)
	if err != nil {
		return pool.Sandbox{}, err
	}
	sb, err := r.create(ctx, t, addr)
	switch {
	case err == nil:
		r.bind(addr, sb.ID)
	case errors.Is(err, errPortTaken):
		// Kept held: another sandbox's bridge port has it.
	default:
		r.give(addr)
	}
	return sb, err
}

// create makes and starts a sandbox of t: wired at addr by the node when addr is valid (a
// container with no network of the engine's), else on the engine's network.
func (r *Runtime) create(ctx context.Context, t pool.Template, addr netip.Addr) (pool.Sandbox, error) {
	env := inside.Env(r.cfg.ProxyURL, t.Workdir)
	for k, v := range t.Env {
		env = append(env, k+"="+v)
	}
	uid, gid, err := pool.ParseUser(t.User)
	if err != nil {
		return pool.Sandbox{}, fmt.Errorf("docker: template %s: user %w", t.Name, err)
	}
	// The workspace and /tmp are executable: an agent runs what it builds (./a.out, ./gradlew,
	// node_modules/.bin, a venv's scripts). noexec would buy nothing, since a process can run
	// what it writes through memfd_create anyway; nosuid and nodev stay.
	tmpfsOpt := func(mb int64, mode string) string {
		o := fmt.Sprintf("rw,exec,nosuid,nodev,size=%dm,mode=%s", mb, mode)
		if mode == "0700" {
			o += fmt.Sprintf(",uid=%d,gid=%d", uid, gid)
		}
		return o
	}
	runtime := t.EngineRuntime()
	pids := t.Pids
	init := true // an init (Docker's tini) as PID 1 reaps what killed commands leave behind
	hc := &container.HostConfig{
		Init:           &init,
		NetworkMode:    container.NetworkMode(r.cfg.Network),
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Runtime:        runtime,
		DNS:            []string{r.gw.String()},
		Tmpfs: map[string]string{
			t.Workdir: tmpfsOpt(t.WorkspaceMB, "0700"),
			"/tmp":    tmpfsOpt(t.TmpMB, "1777"),
		},
		Binds: []string{
			r.cfg.CABundle + ":" + inside.BundlePath + ":ro",
			r.cfg.CABundle + ":" + inside.SystemBundlePath + ":ro",
			r.cfg.TrustStore + ":" + inside.TrustStorePath + ":ro",
			r.cfg.ResolvConf + ":/etc/resolv.conf:ro",
		},
		Resources: container.Resources{
			Memory:    t.MemoryMB << 20,
			NanoCPUs:  int64(t.CPUs * 1e9),
			PidsLimit: &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: t.NoFile, Hard: t.NoFile},
				{Name: "nproc", Soft: t.NProc, Hard: t.NProc},
			},
		},
		// IPv6 is off inside the sandbox: the internal network is IPv4 only, and a link-local
		// IPv6 address would reach the host's bridge beside the IPv4 firewall (seen: fe80::
		// addresses come up on every interface unless this is set).
		Sysctls: map[string]string{
			"net.ipv6.conf.all.disable_ipv6":     "1",
			"net.ipv6.conf.default.disable_ipv6": "1",
		},
		RestartPolicy: container.RestartPolicy{Name: "no"},
	}
	if r.cfg.Agent != "" {
		hc.Binds = append(hc.Binds, r.cfg.Agent+":"+agent.Path+":ro")
	}
	cc := &container.Config{
		Image:      t.Image,
		User:       fmt.Sprintf("%d:%d", uid, gid),
		WorkingDir: t.Workdir,
		Env:        env,
		// The sandbox idles until a command is executed in it, under Docker's init, whatever
		// entry point or command the image declares.
		Entrypoint:      []string{"sleep"},
		Cmd:             []string{"infinity"},
		Labels:          map[string]string{LabelManaged: "true", LabelNode: r.cfg.Node, LabelTemplate: t.Name},
		NetworkDisabled: false,
	}
	kept := false
	switch rt, _ := t.RuntimePlatform(); {
	case r.cfg.Agent == "":
	case t.Snapshot.Memory:
		mainAgent(cc, hc)
	case rt != "runsc":
		// gVisor's sandboxes keep the agent an engine exec starts: a checkpoint of one whose
		// memory is not kept restores its main process alone (TestRestoreEndsExecSessions),
		// and a keeper's agent and commands are the main process's.
		keeperAgent(cc, hc)
		kept = true
	}
	// A sandbox the node wires (wire.go) is made with no network at all, not even the engine's
	// "none", whose hook costs most of what the sandbox network does; its address is the
	// node's to give, and is kept on the container for a node that adopts it.
	if addr.IsValid() {
		cc.NetworkDisabled, hc.NetworkMode, hc.DNS = true, "none", nil
		cc.Labels[LabelAddr] = addr.String()
	}
	// Created without the caller's cancellation: a create the engine carries out after the
	// caller gave up would leave a container nobody knows about. Once its id is known it is
	// destroyed if the caller is gone.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	created, err := r.cli.ContainerCreate(cctx, cc, hc, nil, nil, "")
	if err != nil {
		return pool.Sandbox{}, fmt.Errorf("docker: create %s: %w", t.Name, err)
	}
	destroy := func() { r.Destroy(context.WithoutCancel(ctx), created.ID) }
	if ctx.Err() != nil {
		destroy()
		return pool.Sandbox{}, ctx.Err()
	}
	if addr.IsValid() && prewired(t) {
		ns, err := makeNS(nsName(created.ID))
		if err == nil {
			err = plug(ns, addr, r.gw, r.cfg.Subnet, r.cfg.Bridge)
			ns.Close()
		}
		if err != nil {
			destroy()
			return pool.Sandbox{}, fmt.Errorf("docker: wiring sandbox %s into %s at %s: %w", short(created.ID), r.cfg.Bridge, addr, err)
		}
	}
	if err := r.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		destroy()
		return pool.Sandbox{}, fmt.Errorf("docker: start %s: %w", t.Name, err)
	}
	info, err := r.cli.ContainerInspect(ctx, created.ID)
	if err != nil {
		destroy()
		return pool.Sandbox{}, fmt.Errorf("docker: inspect: %w", err)
	}
	if addr.IsValid() && prewired(t) {
		if err := booted(created.ID, addr); err != nil {
			destroy()
			return pool.Sandbox{}, fmt.Errorf("docker: sandbox %s: %w", short(created.ID), err)
		}
	}
	if addr.IsValid() && !prewired(t) {
		if info.State == nil || info.State.Pid <= 0 {
			destroy()
			return pool.Sandbox{}, fmt.Errorf("docker: sandbox %s is not running after its start", short(created.ID))
		}
		if err := wire(created.ID, info.State.Pid, addr, r.gw, r.cfg.Subnet, r.cfg.Bridge); err != nil {
			destroy()
			return pool.Sandbox{}, fmt.Errorf("docker: wiring sandbox %s into %s at %s: %w", short(created.ID), r.cfg.Bridge, addr, err)
		}
	} else if !addr.IsValid() {
		ep := info.NetworkSettings.Networks[r.cfg.Network]
		if ep == nil {
			destroy()
			return pool.Sandbox{}, fmt.Errorf("docker: sandbox %s has no address on %s", short(created.ID), r.cfg.Network)
		}
		if addr, err = netip.ParseAddr(ep.IPAddress); err != nil {
			destroy()
			return pool.Sandbox{}, fmt.Errorf("docker: sandbox address %q: %w", ep.IPAddress, err)
		}
	}
	sb := pool.Sandbox{ID: created.ID, Template: t.Name, Node: r.cfg.Node, Addr: addr, Created: time.Now()}
	// Started while the sandbox warms (Check waits for it), so that a lease's first command
	// finds it serving; a keeper's agent serves already, and is attached to.
	r.startAgent(ctx, sb, kept)
	return sb, nil
}

// Check runs the health probe (inside.ProbeCmd, through pool.Probe) in sb, as the sandbox user,
// once its exec agent has started or given up (at most 10 seconds).
func (r *Runtime) Check(ctx context.Context, sb pool.Sandbox) error {
	r.agents.wait(sb.ID, 10*time.Second)
	probe, err := inside.ProbeCmd(r.cfg.ProxyURL, r.gw.String())
	if err != nil {
		return err
	}
	if err := pool.Probe(ctx, r, sb, short(sb.ID), probe); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return nil
}

// Destroy removes the container and its anonymous volumes.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	r.agents.drop(id)
	err := r.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("docker: remove %s: %w", short(id), err)
	}
	// Its namespace is gone, and with it both ends of its veth pair; a gVisor sandbox's goes
	// once the node lets go of it too.
	if err := dropNS(id); err != nil {
		return fmt.Errorf("docker: remove %s: %w", short(id), err)
	}
	r.release(id)
	return nil
}

// List returns this node's containers.
func (r *Runtime) List(ctx context.Context) ([]pool.Sandbox, error) {
	cs, err := r.containers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]pool.Sandbox, 0, len(cs))
	for _, c := range cs {
		sb := pool.Sandbox{ID: c.ID, Template: c.Labels[LabelTemplate], Node: r.cfg.Node, Created: time.Unix(c.Created, 0)}
		if addr, ok := wiredAddr(c.Labels); ok {
			sb.Addr = addr
		} else if c.NetworkSettings != nil {
			if ep := c.NetworkSettings.Networks[r.cfg.Network]; ep != nil {
				sb.Addr, _ = netip.ParseAddr(ep.IPAddress)
			}
		}
		out = append(out, sb)
	}
	return out, nil
}

// containers lists this node's containers, running or not.
func (r *Runtime) containers(ctx context.Context) ([]container.Summary, error) {
	cs, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelNode+"="+r.cfg.Node))})
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	return cs, nil
}

// Exec runs req as the sandbox user, through the sandbox's exec agent when it has one serving
// (and req is not on a terminal), else by engine exec, and streams its output until the command
// ends or ctx does. Its processes carry req.Marker, when set, for Signal to find. When ctx ends
// first, an engine exec's process tree is killed from the host (where the host sees it: not
// under gVisor), an agent's command with its process group, and ctx's error is returned.
// Choosing a marker, req.Timeout and the kill of what the marker finds are the policy every
// backend shares (pool.WithPolicy), which the pool applies over this.
func (r *Runtime) Exec(ctx context.Context, sb pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	env := make([]string, 0, len(req.Env)+1)
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	if req.Marker != "" {
		env = append(env, inside.Marker+"="+req.Marker)
	}
	if !req.TTY {
		if code, ran, err := r.agentExec(ctx, sb, req, env, stdin, stdout, stderr); ran {
			return code, err
		}
	}
	cmd := req.Cmd
	if req.TTY {
		cmd = inside.OnTerminal(req.Cmd, req.Size.Rows, req.Size.Cols)
	}
	ex, err := r.cli.ContainerExecCreate(ctx, sb.ID, container.ExecOptions{
		Cmd: cmd, Env: env, WorkingDir: req.Workdir,
		AttachStdout: true, AttachStderr: true, AttachStdin: stdin != nil,
	})
	if err != nil {
		return -1, fmt.Errorf("docker: exec: %w", err)
	}
	att, err := r.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, fmt.Errorf("docker: exec attach: %w", err)
	}
	defer att.Close()
	if req.TTY && req.Resize != nil {
		go pool.FollowResize(context.WithoutCancel(ctx), r, sb, req.Marker, req.Resize)
	}
	if stdin != nil {
		go func() {
			io.Copy(att.Conn, stdin)
			att.CloseWrite()
		}()
	}
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		r.killExec(context.WithoutCancel(ctx), ex.ID)
		att.Close()
		<-done
		return -1, ctx.Err()
	}
	if err != nil {
		return -1, fmt.Errorf("docker: exec stream: %w", err)
	}
	// The output has ended, so the command has: its exit code is had even if ctx ends
	// meanwhile (execExit gives up after about a second).
	return r.execExit(context.WithoutCancel(ctx), ex.ID)
}

// execExit returns the exit code of an exec whose output stream has ended. The stream can end a
// moment before the engine records the exit, usually well under a millisecond later: it is
// asked again after 1 ms, then ever less often, for up to about a second.
func (r *Runtime) execExit(ctx context.Context, id string) (int, error) {
	pause, waited := time.Millisecond, time.Duration(0)
	for {
		ins, err := r.cli.ContainerExecInspect(ctx, id)
		if err != nil {
			return -1, fmt.Errorf("docker: exec inspect: %w", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if waited > time.Second {
			return -1, fmt.Errorf("docker: exec %s still running %s after its output ended", id, waited.Round(time.Millisecond))
		}
		time.Sleep(pause)
		waited += pause
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// runQuiet runs cmd in sb as its user, discarding what it writes, within 10 seconds.
func (r *Runtime) runQuiet(ctx context.Context, sb pool.Sandbox, cmd []string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ex, err := r.cli.ContainerExecCreate(ctx, sb.ID, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return fmt.Errorf("docker: exec: %w", err)
	}
	att, err := r.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("docker: exec attach: %w", err)
	}
	io.Copy(io.Discard, att.Reader)
	att.Close()
	return nil
}

// Signal sends sig, from inside sb and as its user, to every process that an exec with marker
// started (inside.SignalCmd): what killExec cannot reach from the host (under gVisor, all of
// them), and the only way to signal a background process and what it started. The command runs
// by engine exec, not through the agent, which code in the sandbox can stop.
func (r *Runtime) Signal(ctx context.Context, sb pool.Sandbox, marker, sig string) error {
	if marker == "" || !slices.Contains(pool.Signals, sig) {
		return fmt.Errorf("%w: signal %q to marker %q", pool.ErrBadRequest, sig, marker)
	}
	if err := r.runQuiet(ctx, sb, inside.SignalCmd(marker, sig)); err != nil {
		return fmt.Errorf("signal: %w", err)
	}
	return nil
}

// killExec kills the exec's process and all its descendants. The engine has no call for it, so
// the node (which shares the host's process table with the engine) walks /proc.
func (r *Runtime) killExec(ctx context.Context, execID string) {
	ins, err := r.cli.ContainerExecInspect(ctx, execID)
	if err != nil || ins.Pid == 0 {
		return
	}
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may hold spaces.
		s := string(b)
		rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(rest) > 1 {
			ppid, _ := strconv.Atoi(rest[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	queue := []int{ins.Pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		syscall.Kill(p, syscall.SIGKILL)
	}
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
