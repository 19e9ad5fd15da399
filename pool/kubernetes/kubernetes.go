// Package kubernetes runs a node's sandboxes as Pods on the Kubernetes node the node agent runs
// on: pool.Runtime and pool.Backend over the API server. A warm sandbox is a Pod built from its
// template with the Docker backend's hardening expressed as a security context; commands and
// files go through the Pod's exec subresource; destroy is deletion; the agent adopts its own
// Pods after a restart by their labels. The lease path makes no API server call: the pool
// leases what it has made warm.
package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/inside"
)

// Labels every Pod carries; List and adoption select by the first two.
const (
	LabelManaged  = "airlock.dev/managed"
	LabelNode     = "airlock.dev/node"
	LabelTemplate = "airlock.dev/template"
)

// container is the name of the sandbox's one container.
const container = "sandbox"

// TrustConfigMap is the name of the node's ConfigMap (node as ShortID spells it) that holds what every sandbox trusts (the
// CA bundle and the JVM's trust store), which Setup writes and every Pod mounts.
func TrustConfigMap(node string) string { return "airlock-trust-" + node }

// Config is what the Runtime needs.
type Config struct {
	Node string // the airlock node
	// NodeName is the Kubernetes node the Pods are placed on (spec.nodeName): the one the agent
	// runs on, whose gateway and resolver they reach and whose firewall confines them.
	NodeName  string
	Namespace string
	// ProxyURL is the gateway as Pods reach it; Resolver the resolver's address (port 53).
	ProxyURL string
	Resolver netip.Addr
	// RuntimeClasses maps a template's runtime (its EngineRuntime: "runsc", "runsc-ptrace", "crun") to
	// the RuntimeClass its Pods run under; runc, the default, needs none.
	RuntimeClasses map[string]string
	// DisableIPv6 sets the Pods' sysctls that turn IPv6 off (the firewall is IPv4); the
	// kubelet must allow them (allowedUnsafeSysctls: net.ipv6.conf.*).
	DisableIPv6 bool
	// StartTimeout bounds a Pod's start, from creation to running with an address.
	StartTimeout time.Duration
}

// Runtime implements pool.Runtime on Kubernetes. Safe for concurrent use.
type Runtime struct {
	cfg  Config
	id   string // ShortID of cfg.Node
	rest *rest.Config
	cli  k8s.Interface
}

var _ pool.Runtime = (*Runtime)(nil)

// RESTConfig loads the API server's address and credentials: from kubeconfig when it is set,
// else from the Pod the agent runs in (its service account).
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes: not in a cluster and no kubeconfig given: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// New returns a Runtime that talks to the API server at rc.
func New(cfg Config, rc *rest.Config) (*Runtime, error) {
	switch {
	case cfg.Node == "" || cfg.NodeName == "" || cfg.Namespace == "":
		return nil, errors.New("kubernetes: the airlock node, the Kubernetes node and the namespace must be named")
	case cfg.ProxyURL == "" || !cfg.Resolver.IsValid():
		return nil, errors.New("kubernetes: the gateway and the resolver must be given")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	rc = rest.CopyConfig(rc)
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100 // a refill of several Pods at once is not throttled client-side
	}
	cli, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return &Runtime{cfg: cfg, id: ShortID(cfg.Node), rest: rc, cli: cli}, nil
}

// ShortID is how node is spelt in the names of its Pods, ConfigMap, NetworkPolicy and firewall
// chain, and in its label: node itself when it is a DNS label of at most 20 characters (the
// chain AIRLOCK-<id> may have 28), else its first 11 letters and digits, a dash and 8 hex
// digits of its SHA-256, so that a Kubernetes node name ("ip-10-0-1-23.ec2.internal") serves.
func ShortID(node string) string {
	if len(node) <= 20 && len(validation.IsDNS1123Label(node)) == 0 {
		return node
	}
	var b strings.Builder
	for _, c := range strings.ToLower(node) {
		if b.Len() == 11 {
			break
		}
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else if b.Len() > 0 {
			b.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(node))
	prefix := strings.TrimRight(b.String(), "-")
	if prefix == "" {
		prefix = "n"
	}
	return prefix + "-" + hex.EncodeToString(sum[:4])
}

// Client is the API client, for the backend's own objects.
func (r *Runtime) Client() k8s.Interface { return r.cli }

// Image returns t's image reference: on Kubernetes the node pulls it (or has it), so it is
// neither resolved nor scanned here; what the scan checks on Docker (a non-root user) is
// enforced at run time by the security context (runAsNonRoot and the template's uid) and by
// the health probe.
func (r *Runtime) Image(ctx context.Context, t pool.Template) (string, error) {
	if t.Image == "" {
		return "", fmt.Errorf("kubernetes: template %s names no image", t.Name)
	}
	if t.Built() {
		return "", fmt.Errorf("kubernetes: template %s is built from a Dockerfile or devcontainer.json on the local engine; on Kubernetes name an image the node can pull (build and push it first)", t.Name)
	}
	return t.Image, nil
}

// Pod is the Pod a sandbox of t is: the spec alone, with the hardening every sandbox gets.
func (r *Runtime) Pod(t pool.Template, name string) (*corev1.Pod, error) {
	uid, gid, err := pool.ParseUser(t.User)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: template %s: user %w", t.Name, err)
	}
	image := t.Image
	if image == "" {
		image = t.Name
	}
	var env []corev1.EnvVar
	for _, kv := range inside.Env(r.cfg.ProxyURL, t.Workdir) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	// The kubelet gives every container the API server's service address, enableServiceLinks
	// or not; a sandbox has no business there (the firewall keeps it out), so these are empty.
	for _, k := range serviceVars {
		env = append(env, corev1.EnvVar{Name: k})
	}
	keys := make([]string, 0, len(t.Env))
	for k := range t.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: k, Value: t.Env[k]})
	}
	no, yes := false, true
	u, g := int64(uid), int64(gid)
	mem := resource.NewQuantity(t.MemoryMB<<20, resource.BinarySI)
	cpu := resource.NewMilliQuantity(int64(t.CPUs*1000), resource.DecimalSI)
	limits := corev1.ResourceList{corev1.ResourceMemory: *mem, corev1.ResourceCPU: *cpu}
	// Memory is reserved as it is capped (what a sandbox may use, the node must have); CPU is
	// capped at the template's and reserved at a tenth of it: a warm sandbox idles, and a
	// node reserving whole cores for idle Pods would hold a handful (the Docker backend caps CPU
	// and reserves none).
	requests := corev1.ResourceList{corev1.ResourceMemory: *mem,
		corev1.ResourceCPU: *resource.NewMilliQuantity(max(int64(t.CPUs*100), 10), resource.DecimalSI)}
	ws := resource.NewQuantity(t.WorkspaceMB<<20, resource.BinarySI)
	tmp := resource.NewQuantity(t.TmpMB<<20, resource.BinarySI)
	psc := &corev1.PodSecurityContext{
		RunAsNonRoot: &yes, RunAsUser: &u, RunAsGroup: &g, FSGroup: &g,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if r.cfg.DisableIPv6 {
		psc.Sysctls = []corev1.Sysctl{{Name: "net.ipv6.conf.all.disable_ipv6", Value: "1"}, {Name: "net.ipv6.conf.default.disable_ipv6", Value: "1"}}
	}
	trust := TrustConfigMap(r.id)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: r.cfg.Namespace,
			Labels: map[string]string{LabelManaged: "true", LabelNode: r.id, LabelTemplate: t.Name},
		},
		Spec: corev1.PodSpec{
			NodeName:                     r.cfg.NodeName,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			HostNetwork:                  false, HostPID: false, HostIPC: false,
			ShareProcessNamespace: &no,
			SecurityContext:       psc,
			// The node's resolver alone: no cluster DNS, no search domains.
			DNSPolicy: corev1.DNSNone,
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{r.cfg.Resolver.String()},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr("0")}, {Name: "attempts", Value: ptr("1")}, {Name: "timeout", Value: ptr("2")}}},
			TerminationGracePeriodSeconds: ptr(int64(0)),
			Containers: []corev1.Container{{
				Name: container, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				// The sandbox idles until a command is executed in it, whatever entry point or
				// command the image declares.
				Command: []string{"sleep"}, Args: []string{"infinity"},
				WorkingDir: t.Workdir, Env: env,
				Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests},
				SecurityContext: &corev1.SecurityContext{
					Privileged: &no, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					RunAsNonRoot: &yes, RunAsUser: &u, RunAsGroup: &g,
					ProcMount: ptr(corev1.DefaultProcMount),
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "workspace", MountPath: t.Workdir},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "trust", MountPath: inside.BundlePath, SubPath: "ca-bundle.pem", ReadOnly: true},
					{Name: "trust", MountPath: inside.SystemBundlePath, SubPath: "ca-bundle.pem", ReadOnly: true},
					{Name: "trust", MountPath: inside.TrustStorePath, SubPath: "ca-truststore.p12", ReadOnly: true},
				},
			}},
			// The workspace and /tmp are memory, as on Docker: what is written there counts
			// against the Pod's memory limit, and each is capped.
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ws}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}},
				{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: trust}, DefaultMode: ptr(int32(0o444))}}},
			},
		},
	}
	if rt := t.EngineRuntime(); rt != "runc" {
		rc, ok := r.cfg.RuntimeClasses[rt]
		if !ok {
			return nil, fmt.Errorf("kubernetes: template %s runs under %s, and kubernetes.runtime_classes names no RuntimeClass for it", t.Name, rt)
		}
		pod.Spec.RuntimeClassName = &rc
	}
	return pod, nil
}

func ptr[T any](v T) *T { return &v }

// serviceVars are the variables the kubelet sets for the cluster's "kubernetes" Service.
var serviceVars = []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_PORT_HTTPS",
	"KUBERNETES_PORT", "KUBERNETES_PORT_443_TCP", "KUBERNETES_PORT_443_TCP_ADDR", "KUBERNETES_PORT_443_TCP_PORT", "KUBERNETES_PORT_443_TCP_PROTO"}

// Create makes the Pod and returns it once it runs and has an address.
func (r *Runtime) Create(ctx context.Context, t pool.Template) (pool.Sandbox, error) {
	pod, err := r.Pod(t, "sb-"+r.id+"-"+inside.NewMarker()[:12])
	if err != nil {
		return pool.Sandbox{}, err
	}
	pods := r.cli.CoreV1().Pods(r.cfg.Namespace)
	// Created without the caller's cancellation: a Pod the API server made after the caller
	// gave up would be left behind. Once it exists it is deleted if the caller is gone.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	created, err := pods.Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return pool.Sandbox{}, fmt.Errorf("kubernetes: create a Pod of %s: %w", t.Name, err)
	}
	sb, err := r.running(ctx, created)
	if err != nil {
		r.Destroy(context.WithoutCancel(ctx), created.Name)
		return pool.Sandbox{}, err
	}
	sb.Template, sb.Node = t.Name, r.cfg.Node
	return sb, nil
}

// running waits until pod runs with an address, or fails saying why it did not start.
func (r *Runtime) running(ctx context.Context, pod *corev1.Pod) (pool.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	w, err := r.cli.CoreV1().Pods(r.cfg.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		return pool.Sandbox{}, fmt.Errorf("kubernetes: watch Pod %s: %w", pod.Name, err)
	}
	defer w.Stop()
	for {
		if sb, done, err := started(pod); done {
			return sb, err
		}
		select {
		case <-ctx.Done():
			return pool.Sandbox{}, fmt.Errorf("kubernetes: Pod %s did not run within %s (phase %s%s)", pod.Name, r.cfg.StartTimeout, pod.Status.Phase, waitingReason(pod))
		case ev, ok := <-w.ResultChan():
			if !ok {
				return pool.Sandbox{}, fmt.Errorf("kubernetes: the watch of Pod %s ended before it ran", pod.Name)
			}
			switch ev.Type {
			case watch.Deleted:
				return pool.Sandbox{}, fmt.Errorf("kubernetes: Pod %s was deleted before it ran", pod.Name)
			case watch.Error:
				return pool.Sandbox{}, fmt.Errorf("kubernetes: watching Pod %s: %v", pod.Name, apierrors.FromObject(ev.Object))
			}
			if p, ok := ev.Object.(*corev1.Pod); ok {
				pod = p
			}
		}
	}
}

// started reports whether pod has started (with its sandbox), or will not (with why).
func started(pod *corev1.Pod) (pool.Sandbox, bool, error) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return pool.Sandbox{}, true, fmt.Errorf("kubernetes: Pod %s ended before it was used (phase %s: %s%s)", pod.Name, pod.Status.Phase, pod.Status.Message, waitingReason(pod))
	case corev1.PodRunning:
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == container && cs.State.Running != nil && pod.Status.PodIP != "" {
				sb, err := sandboxOf(pod)
				return sb, true, err
			}
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		// Waiting reasons that never resolve on their own.
		if w := cs.State.Waiting; w != nil && (strings.Contains(w.Reason, "Err") || strings.HasPrefix(w.Reason, "Invalid") || w.Reason == "CreateContainerConfigError") {
			return pool.Sandbox{}, true, fmt.Errorf("kubernetes: Pod %s cannot start: %s: %s", pod.Name, w.Reason, w.Message)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return pool.Sandbox{}, true, fmt.Errorf("kubernetes: Pod %s cannot be placed: %s", pod.Name, c.Message)
		}
	}
	return pool.Sandbox{}, false, nil
}

// waitingReason is why pod's container waits, for an error message.
func waitingReason(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return "; " + w.Reason + ": " + w.Message
		}
	}
	return ""
}

// sandboxOf is the sandbox pod is.
func sandboxOf(pod *corev1.Pod) (pool.Sandbox, error) {
	addr, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return pool.Sandbox{}, fmt.Errorf("kubernetes: Pod %s has address %q: %w", pod.Name, pod.Status.PodIP, err)
	}
	return pool.Sandbox{ID: pod.Name, Template: pod.Labels[LabelTemplate], Addr: addr,
		Created: pod.CreationTimestamp.Time}, nil
}

// Destroy deletes the Pod at once (no grace: a sandbox has nothing to save).
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	err := r.cli.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete Pod %s: %w", id, err)
	}
	return nil
}

// selector selects this node's Pods.
func (r *Runtime) selector() string {
	return labels.SelectorFromSet(labels.Set{LabelManaged: "true", LabelNode: r.id}).String()
}

// List returns this node's Pods that are not being deleted; a Pod without an address yet is
// listed without one.
func (r *Runtime) List(ctx context.Context) ([]pool.Sandbox, error) {
	pl, err := r.cli.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: r.selector()})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list Pods: %w", err)
	}
	out := make([]pool.Sandbox, 0, len(pl.Items))
	for i := range pl.Items {
		p := &pl.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		sb, _ := sandboxOf(p)
		sb.ID, sb.Template, sb.Node = p.Name, p.Labels[LabelTemplate], r.cfg.Node
		out = append(out, sb)
	}
	return out, nil
}

// Check runs the health probe (inside.ProbeCmd, through pool.Probe) in the Pod.
func (r *Runtime) Check(ctx context.Context, sb pool.Sandbox) error {
	probe, err := inside.ProbeCmd(r.cfg.ProxyURL, r.cfg.Resolver.String())
	if err != nil {
		return err
	}
	if err := pool.Probe(ctx, r, sb, sb.ID, probe); err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	return nil
}

// Exec runs req in the Pod through the API server's exec subresource, as the sandbox user,
// streaming its output until the command ends or ctx does (then ctx's error is returned). The
// exec subresource has no environment or working directory of its own, so the command is
// started by env (which sets both, and req.Marker when set, for Signal to find its processes)
// and sh (so that no word of the command is taken for an assignment). Choosing a marker,
// req.Timeout and the kill of what the marker finds are the policy every backend shares
// (pool.WithPolicy), which the pool applies over this.
func (r *Runtime) Exec(ctx context.Context, sb pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if len(req.Cmd) == 0 {
		return -1, fmt.Errorf("%w: exec needs a command", pool.ErrBadRequest)
	}
	cmd := req.Cmd
	if req.TTY {
		cmd = inside.OnTerminal(req.Cmd, req.Size.Rows, req.Size.Cols)
	}
	argv, err := execArgv(req, cmd, req.Marker)
	if err != nil {
		return -1, err
	}
	if req.TTY && req.Resize != nil {
		go pool.FollowResize(context.WithoutCancel(ctx), r, sb, req.Marker, req.Resize)
	}
	code, err := r.stream(ctx, sb.ID, argv, stdin, stdout, stderr)
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	return code, err
}

// execArgv is what the exec subresource runs for req: env sets the working directory and the
// environment (after "--", so a name that begins with '-' stays a name and is never taken for
// one of env's options), and sh starts cmd, so no word of it is taken for an assignment.
func execArgv(req pool.ExecRequest, cmd []string, marker string) ([]string, error) {
	argv := []string{"env"}
	if req.Workdir != "" {
		argv = append(argv, "-C", req.Workdir)
	}
	argv = append(argv, "--")
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("%w: environment variable name %q", pool.ErrBadRequest, k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		argv = append(argv, k+"="+req.Env[k])
	}
	if marker != "" {
		argv = append(argv, inside.Marker+"="+marker)
	}
	argv = append(argv, "sh", "-c", `exec "$0" "$@"`)
	return append(argv, cmd...), nil
}

// stream runs argv in pod over the exec subresource and returns its exit code: WebSocket, the
// API server's current protocol, falling back to SPDY for one that lacks it.
func (r *Runtime) stream(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	u := r.cli.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.cfg.Namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(r.rest, "GET", u.String())
	if err != nil {
		return -1, fmt.Errorf("kubernetes: exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(r.rest, "POST", u)
	if err != nil {
		return -1, fmt.Errorf("kubernetes: exec: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, fmt.Errorf("kubernetes: exec: %w", err)
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit) && exit.Exited():
		return exit.ExitStatus(), nil
	case apierrors.IsNotFound(err):
		return -1, fmt.Errorf("kubernetes: sandbox %s is gone: %w", pod, err)
	}
	return -1, fmt.Errorf("kubernetes: exec in %s: %w", pod, err)
}

// run runs cmd in sb, discarding what it writes, within 10 seconds.
func (r *Runtime) run(ctx context.Context, sb pool.Sandbox, cmd []string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := r.stream(ctx, sb.ID, cmd, nil, io.Discard, io.Discard)
	return err
}

// Signal sends sig to the processes an exec with marker started.
func (r *Runtime) Signal(ctx context.Context, sb pool.Sandbox, marker, sig string) error {
	if marker == "" || !slices.Contains(pool.Signals, sig) {
		return fmt.Errorf("%w: signal %q to marker %q", pool.ErrBadRequest, sig, marker)
	}
	if err := r.run(ctx, sb, inside.SignalCmd(marker, sig)); err != nil {
		return fmt.Errorf("signal: %w", err)
	}
	return nil
}
