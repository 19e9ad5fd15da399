package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/binding"
)

// Errors callers can test with errors.Is.
var (
	ErrNoWarm = errors.New("no warm sandbox available")
	// ErrLeaseNotFound: no such lease, or not the caller's (another tenant's lease is not
	// theirs to probe, so it is not found either).
	ErrLeaseNotFound   = errors.New("lease not found")
	ErrUnknownTemplate = errors.New("unknown template")
	ErrBadRequest      = errors.New("bad lease request")
	// ErrTimedOut: a command ran past its timeout and was killed, with all it started.
	ErrTimedOut     = errors.New("command timed out")
	ErrTokenRefused = errors.New("task token refused")
	ErrJTIInUse     = errors.New("token id already binds a lease")
	// ErrNotOwner: the lease is held by another node, which alone acts on it.
	ErrNotOwner = errors.New("lease is held by another node")
)

// Template describes one kind of sandbox. Hardening is not part of it: every sandbox gets it.
type Template struct {
	Name     string  `yaml:"name"`
	Image    string  `yaml:"image"`
	User     string  `yaml:"user"`    // uid:gid the sandbox runs as; never root
	Workdir  string  `yaml:"workdir"` // the tmpfs workspace, also HOME
	CPUs     float64 `yaml:"cpus"`
	MemoryMB int64   `yaml:"memory_mb"`
	Pids     int64   `yaml:"pids"`
	// WorkspaceMB and TmpMB cap the tmpfs mounts at Workdir and /tmp, which are executable (a
	// task runs what it builds) but nosuid and nodev. What is written there is memory: it counts
	// against MemoryMB, so a full workspace leaves the processes MemoryMB - WorkspaceMB - TmpMB.
	WorkspaceMB int64 `yaml:"workspace_mb"`
	TmpMB       int64 `yaml:"tmp_mb"`
	// NoFile caps open files per process (RLIMIT_NOFILE). NProc caps processes of the sandbox
	// user (RLIMIT_NPROC), which the kernel counts across every sandbox running as that uid on
	// the host, so it must leave room for all of them; Pids is what bounds one sandbox.
	NoFile int64 `yaml:"nofile"`
	NProc  int64 `yaml:"nproc"`
	// Runtime is the OCI runtime the engine runs the sandbox with: "runc" (the default) or
	// "crun", the container tier, which run the same OCI spec (namespaces, seccomp, dropped
	// capabilities, no new privileges) and differ in speed; or "runsc", gVisor's user-space
	// kernel between the sandbox and the host's. crun is an engine runtime of its own, which
	// `make crun` (scripts/crun.sh) installs and registers.
	Runtime string `yaml:"runtime"`
	// Platform is how gVisor's runsc intercepts the sandbox's system calls: "systrap" (the
	// default), "ptrace", or "kvm" where the host's CPU offers it. Only with runtime runsc;
	// each platform is its own engine runtime (EngineRuntime), which `make runsc` registers.
	Platform string            `yaml:"platform"`
	Env      map[string]string `yaml:"env"` // non-secret environment
	// MinWarm is the floor of the warm pool and MaxWarm its ceiling: between them the node
	// sizes the pool to the lease rate (see PoolStatus.Target). A MaxWarm at or below MinWarm
	// keeps the pool at MinWarm; neither goes past MaxTotal or the node's memory budget.
	MinWarm int `yaml:"min_warm"`
	MaxWarm int `yaml:"max_warm"`
	// OnEmpty says what a lease does when no sandbox is warm (empty: OnEmptyWait), and WaitFor
	// how long it waits then; AfterWait what a lease that waited in vain does (empty:
	// AfterWaitCold).
	OnEmpty    OnEmpty       `yaml:"on_empty"`
	WaitFor    time.Duration `yaml:"wait_for"`
	AfterWait  AfterWait     `yaml:"after_wait"`
	MaxTotal   int           `yaml:"max_total"`
	DefaultTTL time.Duration `yaml:"default_ttl"`
	MaxTTL     time.Duration `yaml:"max_ttl"`
	// Ports, when set, are the only sandbox ports `airlock port` may expose for a lease of this
	// template (a devcontainer's forwardPorts fill it).
	Ports []int `yaml:"ports"`
	// Build and Devcontainer make the template's image from a Dockerfile or a devcontainer.json
	// on the local engine (`airlock template build`); at most one is set, and Image is then the
	// tag the build writes. Paths are relative to the directory airlock runs in, as the
	// config's other file paths are.
	Build        *Build `yaml:"build"`
	Devcontainer string `yaml:"devcontainer"`
	// BuildNetwork is the network a build's RUN steps (and a devcontainer's create commands)
	// have: "none" (the default: a Dockerfile or devcontainer.json from a repository must not
	// reach the host's networks or the internet from the builder), or "default", the builder's
	// bridge, for builds that install from a package index.
	BuildNetwork string `yaml:"build_network"`
	// Snapshot is what snapshots of its leases may hold, and how long one may stay paused.
	Snapshot SnapshotPolicy `yaml:"snapshot"`
	// Caches are the named caches its leases find filled (cache.go); none unless declared.
	Caches []Cache `yaml:"caches"`
}

// Start is how a lease's sandbox was had: StartWarm, StartWaited or StartCold.
type Start = apitype.Start

const (
	StartWarm   = apitype.StartWarm
	StartWaited = apitype.StartWaited
	StartCold   = apitype.StartCold
)

// OnEmpty is what a lease does when its template has no warm sandbox.
type OnEmpty string

const (
	// OnEmptyWait (the default) queues the lease for the first sandbox to become warm, leases
	// served in the order they came, up to the template's WaitFor, and then does what its
	// AfterWait says.
	OnEmptyWait OnEmpty = "wait"
	// OnEmptyCold starts a sandbox for the lease at once.
	OnEmptyCold OnEmpty = "cold"
	// OnEmptyRefuse refuses the lease at once.
	OnEmptyRefuse OnEmpty = "refuse"
)

// AfterWait is what a lease that waited its template's WaitFor in vain does.
type AfterWait string

const (
	AfterWaitCold   AfterWait = "cold"   // start a sandbox for it (the default)
	AfterWaitRefuse AfterWait = "refuse" // refuse it
)

// Build names a Dockerfile and its build context.
type Build struct {
	Dockerfile string            `yaml:"dockerfile"` // default: Dockerfile in Context
	Context    string            `yaml:"context"`    // default: the Dockerfile's folder
	Args       map[string]string `yaml:"args"`       // build arguments; never secrets (they stay in the image's history)
}

// Platforms are gVisor's platforms a runsc template may name; the first is the default.
var Platforms = []string{"systrap", "ptrace", "kvm"}

// RuntimePlatform is t's runtime and, under runsc, the platform it runs on ("runsc", "systrap"),
// with the defaults filled in.
func (t Template) RuntimePlatform() (runtime, platform string) {
	switch {
	case t.Runtime == "" || t.Runtime == "runc":
		return "runc", ""
	case t.Runtime == "crun":
		return "crun", ""
	case t.Platform == "":
		return t.Runtime, Platforms[0]
	}
	return t.Runtime, t.Platform
}

// EngineRuntime is the name the container engine knows t's runtime by: "runc" or "crun"; "runsc" for
// gVisor on its default platform; "runsc-ptrace" or "runsc-kvm" for the others, each
// registered with its own --platform argument.
func (t Template) EngineRuntime() string {
	rt, platform := t.RuntimePlatform()
	if platform == "" || platform == Platforms[0] {
		return rt
	}
	return rt + "-" + platform
}

// WarmCeiling is the most warm sandboxes the node sizes t's pool up to: MaxWarm, at least
// MinWarm, and at most MaxTotal where that is set.
func (t Template) WarmCeiling() int {
	c := max(t.MinWarm, t.MaxWarm)
	if t.MaxTotal > 0 {
		c = min(c, t.MaxTotal)
	}
	return c
}

// Built reports whether t's image is built from a Dockerfile or a devcontainer.json.
func (t Template) Built() bool { return t.Build != nil || t.Devcontainer != "" }

// Validate checks t, returning one error per field that is wrong, each naming the field by its
// configuration name ("memory_mb: must be >= 16"). config.Validate and New both call it.
func (t Template) Validate() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if t.Name == "" {
		bad("name", "required")
	}
	if t.Image == "" {
		bad("image", "required")
	}
	if _, _, err := ParseUser(t.User); err != nil {
		bad("user", "%v", err)
	}
	if !path.IsAbs(t.Workdir) || path.Clean(t.Workdir) != t.Workdir || t.Workdir == "/" {
		bad("workdir", "must be a clean absolute path other than /")
	}
	if t.CPUs <= 0 {
		bad("cpus", "must be > 0")
	}
	if t.MemoryMB < 16 {
		bad("memory_mb", "must be >= 16")
	}
	if t.Pids <= 0 {
		bad("pids", "must be > 0")
	}
	if t.WorkspaceMB <= 0 {
		bad("workspace_mb", "must be > 0")
	}
	if t.TmpMB <= 0 {
		bad("tmp_mb", "must be > 0")
	}
	if t.NoFile < 64 {
		bad("nofile", "must be >= 64")
	}
	if t.NProc < t.Pids {
		bad("nproc", "must be at least pids (%d): it counts the processes of every sandbox of the uid", t.Pids)
	}
	if t.Runtime != "runc" && t.Runtime != "crun" && t.Runtime != "runsc" {
		bad("runtime", "%q is not runc, crun or runsc", t.Runtime)
	}
	switch {
	case t.Platform != "" && t.Runtime != "runsc":
		bad("platform", "is gVisor's, for runtime runsc only")
	case t.Runtime == "runsc" && !slices.Contains(Platforms, t.Platform) && t.Platform != "":
		bad("platform", "%q is not one of %s", t.Platform, strings.Join(Platforms, ", "))
	}
	if t.MinWarm < 0 || (t.MaxTotal > 0 && t.MinWarm > t.MaxTotal) {
		bad("min_warm", "must be between 0 and max_total")
	}
	if t.MaxWarm < 0 {
		bad("max_warm", "must be >= 0")
	}
	if t.OnEmpty != "" && t.OnEmpty != OnEmptyWait && t.OnEmpty != OnEmptyCold && t.OnEmpty != OnEmptyRefuse {
		bad("on_empty", "%q is not wait, cold or refuse", t.OnEmpty)
	}
	if t.AfterWait != "" && t.AfterWait != AfterWaitCold && t.AfterWait != AfterWaitRefuse {
		bad("after_wait", "%q is not cold or refuse", t.AfterWait)
	}
	if t.WaitFor < 0 || t.WaitFor > 5*time.Minute {
		bad("wait_for", "must be between 0 and 5m")
	}
	if t.DefaultTTL <= 0 || t.MaxTTL < t.DefaultTTL {
		bad("default_ttl", "must be > 0 and at most max_ttl")
	}
	for _, p := range t.Ports {
		if p < 1 || p > 65535 {
			bad("ports", "%d is not a port (1-65535)", p)
		}
	}
	if t.Build != nil && t.Devcontainer != "" {
		bad("build", "set build or devcontainer, not both")
	}
	if t.BuildNetwork != "" && t.BuildNetwork != "none" && t.BuildNetwork != "default" {
		bad("build_network", "%q is not none or default", t.BuildNetwork)
	}
	if t.Build != nil && t.Build.Dockerfile == "" && t.Build.Context == "" {
		bad("build", "needs dockerfile or context")
	}
	if len(t.Env) > MaxEnv {
		bad("env", "sets %d variables, more than the %d allowed", len(t.Env), MaxEnv)
	}
	for k, v := range t.Env {
		if why := envRefusal(k, v); why != "" {
			bad("env."+k, "%s", why)
		}
	}
	errs = append(errs, t.validateSnapshot()...)
	return append(errs, t.validateCaches()...)
}

// ParseUser reads a template's user, "UID:GID" in decimal, and refuses root in any spelling: a
// uid or gid of 0 however written ("0", "00", "0:1"), and names, which could map to uid 0 in the
// image ("root", "toor").
func ParseUser(s string) (uid, gid uint32, err error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("%q must be UID:GID in numbers, such as 10001:10001", s)
	}
	num := func(v string) (uint32, error) {
		if v == "" || strings.Trim(v, "0123456789") != "" {
			return 0, fmt.Errorf("%q must be UID:GID in numbers (a name could be root in the image)", s)
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q: %v", s, err)
		}
		if n == 0 {
			return 0, fmt.Errorf("%q is root: sandboxes never run as uid or gid 0", s)
		}
		return uint32(n), nil
	}
	if uid, err = num(u); err != nil {
		return 0, 0, err
	}
	if gid, err = num(g); err != nil {
		return 0, 0, err
	}
	return uid, gid, nil
}

// Sandbox is a running container the pool manages.
type Sandbox struct {
	ID       string     `json:"id"`
	Template string     `json:"template"`
	Node     string     `json:"node"`
	Addr     netip.Addr `json:"addr"`
	Created  time.Time  `json:"created"`
	// Image is the image id (digest) it was made from: a template whose image is rebuilt
	// drains the sandboxes made from the old one.
	Image string `json:"image,omitempty"`
}

// Lease is a sandbox lent to one task.
type Lease struct {
	ID       string    `json:"id"`
	Tenant   string    `json:"tenant,omitempty"`
	Task     string    `json:"task"`
	JTI      string    `json:"jti"`
	Template string    `json:"template"`
	Node     string    `json:"node"`
	Sandbox  Sandbox   `json:"sandbox"`
	Created  time.Time `json:"created"`
	Expires  time.Time `json:"expires"`
	// Start says how the sandbox was had.
	Start Start `json:"start,omitempty"`
	// Token is the task JWT. It stays in the store and is never handed to the sandbox.
	Token string `json:"token,omitempty"`
	// Key is the hex SHA-256 of the API key that leased it (never the key): that key may not
	// approve the lease's own requests.
	Key string `json:"key,omitempty"`
	// Env is set for every command of the lease (a command's own variables win); Metadata is
	// the tenant's own labels, shown with the lease and never given to the sandbox.
	Env      map[string]string `json:"env,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Restored says how the workspace was restored, on the answer of a lease from a snapshot
	// or a resume; it is not stored.
	Restored *Restored `json:"-"`
	// WriteCaches is what the lease asked for when it began: that its template's tenant
	// caches be written back at its end (release or expiry; not at a pause).
	WriteCaches bool `json:"write_caches,omitempty"`
}

// ownedBy reports whether tenant may see and act on l: the one tenant check of the pool.
func (l Lease) ownedBy(tenant string) bool { return l.Tenant == tenant }

// ExecRequest is a command to run in a sandbox.
type ExecRequest struct {
	Cmd     []string          `json:"cmd"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"`
	// Marker, when set, marks the command's processes so Runtime.Signal reaches them and all
	// they start (a background process's); otherwise WithPolicy picks one.
	Marker string `json:"-"`
	// TTY runs the command on a pseudo-terminal of Size (stdout then carries everything it
	// writes; stderr is unused), resized to each size sent on Resize.
	TTY    bool            `json:"-"`
	Size   TermSize        `json:"-"`
	Resize <-chan TermSize `json:"-"`
	// Stdin keeps a background process's input open (Manager.StartProcess); Exec is given its
	// stdin as a reader instead.
	Stdin bool `json:"-"`
}

// TermSize is a terminal's size in character cells.
type TermSize = apitype.TermSize

// Runtime runs sandboxes. Implementations own their backend's details (Docker, Kubernetes);
// nothing backend-specific crosses this interface.
type Runtime interface {
	// Create starts a hardened sandbox from t and returns it once it has an address; the pool
	// sets t.Image to the id Image resolved.
	Create(ctx context.Context, t Template) (Sandbox, error)
	// Exec runs req in sb, streaming output as it comes, until it or ctx ends, and returns the
	// exit code; the timeout, and the kill of what a command cut off started, are WithPolicy's.
	Exec(ctx context.Context, sb Sandbox, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error)
	// Check reports whether a warm sandbox is fit to lease: alive, and reaching the gateway and
	// the resolver from inside.
	Check(ctx context.Context, sb Sandbox) error
	// Image resolves t's image to the id (digest) new sandboxes of t are made from, once it has
	// passed the hardening checks; it is called often, so a runtime checks each id once.
	Image(ctx context.Context, t Template) (string, error)
	// Signal sends sig (a name in Signals) to every process in sb that an exec with this Marker
	// started, and what they started.
	Signal(ctx context.Context, sb Sandbox, marker, sig string) error
	// Destroy removes the sandbox; removing one already gone is not an error.
	Destroy(ctx context.Context, id string) error
	// List returns the sandboxes this node owns.
	List(ctx context.Context) ([]Sandbox, error)
}

// DestroyAll destroys every sandbox rt lists: what an earlier run of a node that does not keep
// its sandboxes left behind, before the node starts anew.
func DestroyAll(ctx context.Context, rt Runtime) error {
	sbs, err := rt.List(ctx)
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		if err := rt.Destroy(ctx, sb.ID); err != nil {
			return err
		}
	}
	return nil
}

// Backend is where a node's sandboxes run: a Runtime, and what that runtime needs around it on
// the node (for Docker, the sandbox network and the host firewall). The node knows backends only
// through this seam: a second runtime or a Kubernetes backend is another implementation.
type Backend interface {
	Runtime
	// Setup makes the backend ready for this node's sandboxes. Unless the node keeps its
	// sandboxes across restarts, what an earlier run left is destroyed first.
	Setup(ctx context.Context) error
	// HostAddr is the address at which this node's sandboxes reach its gateway and resolver:
	// they listen there.
	HostAddr() netip.Addr
	// Teardown removes what Setup made, unless the node keeps its sandboxes, whose
	// confinement then stays in place while the node is down.
	Teardown(ctx context.Context) error
}

// Store shares pool state between the nodes and API replicas of a deployment. It is three jobs,
// which one shared store (Redis) does together, and the Manager uses each through its own part.
type Store interface {
	Leases
	WarmSet
	NodeRegistry
}

// Leases records leases and the bindings that make them visible to a node's gateway and
// resolver.
type Leases interface {
	// Bind records the lease and its binding together and announces the binding, returning the
	// version the store gave it (versions are ordered by the store, never by a node's clock);
	// it fails with ErrJTIInUse when the token already binds another live lease or is held by
	// a gateway (ClaimJTI), and with ErrLeaseState when l's id is bound already (a resumed
	// lease keeps its id: one sandbox at a time is bound under it).
	Bind(ctx context.Context, l Lease, b binding.Binding) (int64, error)
	// Rebind replaces a live lease's record and binding (renewal, token swap: oldJTI is the token
	// id it held, freed when l carries a new one) and announces the binding, returning its new
	// version; it fails with ErrLeaseNotFound when the lease is gone and ErrJTIInUse when the
	// new token id is taken.
	Rebind(ctx context.Context, l Lease, oldJTI string, b binding.Binding) (int64, error)
	// ClaimJTI records that holder uses the token id jti until until; it fails with
	// ErrJTIInUse when the id binds a lease or another holder has it. Claiming an id one
	// already holds succeeds.
	ClaimJTI(ctx context.Context, jti, holder string, until time.Time) error
	// Unclaim gives up holder's claim of jti (a claim another holds is left as it is).
	Unclaim(ctx context.Context, jti, holder string) error
	GetLease(ctx context.Context, id string) (Lease, error)
	ListLeases(ctx context.Context, node string) ([]Lease, error)
	// Expired returns node's leases that expired at or before now; it is cheap, since the
	// reaper calls it every second (WarmSet.Counts counts them for the refill).
	Expired(ctx context.Context, node string, now time.Time) ([]Lease, error)
	// Unbind removes the binding first and announces it, then the lease record. It acts only
	// on the live lease l is (its record, naming l's sandbox): when that has ended already, or
	// the lease was paused and resumed in another sandbox, it changes nothing and fails with
	// ErrLeaseNotFound, so of two ends of one lease at once (a release and a pause, a release
	// and an expiry) one wins, and a late one never touches a resumed lease.
	Unbind(ctx context.Context, l Lease) error
	// BeginEnd is Unbind that also journals end, what finishes l's end (its workspace read,
	// its sandbox destroyed, its record written), under l's node and sandbox, in the same
	// step: a lease is never unbound with its end unjournaled, whatever the node does next.
	BeginEnd(ctx context.Context, l Lease, end []byte) error
	// Ending returns node's journaled ends, by sandbox id; Ended removes one, once finished.
	Ending(ctx context.Context, node string) (map[string][]byte, error)
	Ended(ctx context.Context, node, sandbox string) error
}

// WarmSet holds the warm sandboxes of each node and template. Claim must be atomic: two callers
// never get the same sandbox.
type WarmSet interface {
	AddWarm(ctx context.Context, sb Sandbox) error
	// Claim takes one warm sandbox of template on node, or fails with ErrNoWarm.
	Claim(ctx context.Context, node, template string) (Sandbox, error)
	WarmCount(ctx context.Context, node, template string) (int, error)
	// Forget drops a sandbox from the warm set without touching the container.
	Forget(ctx context.Context, sb Sandbox) error
	ListWarm(ctx context.Context, node string) ([]Sandbox, error)
	// Counts returns node's warm and leased sandboxes of each of templates, in one round
	// trip and at one instant: what the refill reads before it decides, with every template
	// when the memory budget spans them.
	Counts(ctx context.Context, node string, templates []string) (warm, leased []int, err error)
}

// NodeRegistry knows the live nodes of the deployment and where their APIs are, so any node can
// claim another's warm sandbox and route a call to the node holding a lease.
type NodeRegistry interface {
	// Heartbeat records that node is alive with its API at api, for ttl.
	Heartbeat(ctx context.Context, node, api string, ttl time.Duration) error
	Nodes(ctx context.Context) (map[string]string, error)
}
