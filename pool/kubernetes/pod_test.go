package kubernetes

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/inside"
)

func testRuntime(t *testing.T) *Runtime {
	t.Helper()
	r, err := New(Config{Node: "n1", NodeName: "k1", Namespace: "sandboxes", ProxyURL: "http://10.0.0.1:3128",
		Resolver: netip.MustParseAddr("10.0.0.1"), RuntimeClasses: map[string]string{"runsc": "gvisor"}, DisableIPv6: true},
		&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var tmpl = pool.Template{Name: "default", Image: "airlock/default:latest", User: "10001:10002", Workdir: "/workspace",
	CPUs: 1.5, MemoryMB: 512, WorkspaceMB: 128, TmpMB: 64, Env: map[string]string{"LANG": "C.UTF-8"}}

// TestPodIsHardened: every hardening the Docker backend gives a sandbox is in the Pod's spec,
// and nothing that would open it (a service account token, service links, the host's
// namespaces, the cluster's DNS) is.
func TestPodIsHardened(t *testing.T) {
	p, err := testRuntime(t).Pod(tmpl, "sb-n1-x")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	c := s.Containers[0]
	checks := []struct {
		what string
		ok   bool
	}{
		{"placed on its agent's node", s.NodeName == "k1"},
		{"no service account token", s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken},
		{"no service links", s.EnableServiceLinks != nil && !*s.EnableServiceLinks},
		{"not the host's namespaces", !s.HostNetwork && !s.HostPID && !s.HostIPC},
		{"no shared process namespace", s.ShareProcessNamespace != nil && !*s.ShareProcessNamespace},
		{"never restarted", s.RestartPolicy == corev1.RestartPolicyNever},
		{"the node's resolver alone", s.DNSPolicy == corev1.DNSNone && len(s.DNSConfig.Nameservers) == 1 && s.DNSConfig.Nameservers[0] == "10.0.0.1" && len(s.DNSConfig.Searches) == 0},
		{"non-root pod", *s.SecurityContext.RunAsNonRoot && *s.SecurityContext.RunAsUser == 10001 && *s.SecurityContext.RunAsGroup == 10002},
		{"seccomp RuntimeDefault", s.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"IPv6 off", len(s.SecurityContext.Sysctls) == 2},
		{"non-root container", *c.SecurityContext.RunAsNonRoot && *c.SecurityContext.RunAsUser == 10001},
		{"unprivileged", !*c.SecurityContext.Privileged && !*c.SecurityContext.AllowPrivilegeEscalation},
		{"read-only root", *c.SecurityContext.ReadOnlyRootFilesystem},
		{"every capability dropped", len(c.SecurityContext.Capabilities.Drop) == 1 && c.SecurityContext.Capabilities.Drop[0] == "ALL" && len(c.SecurityContext.Capabilities.Add) == 0},
		{"memory limit", c.Resources.Limits.Memory().Value() == 512<<20},
		{"cpu limit", c.Resources.Limits.Cpu().MilliValue() == 1500},
		{"memory reserved as capped", c.Resources.Requests.Memory().Value() == 512<<20},
		{"a tenth of the cpu reserved", c.Resources.Requests.Cpu().MilliValue() == 150},
		{"idles", strings.Join(append(c.Command, c.Args...), " ") == "sleep infinity"},
		{"no ports", len(c.Ports) == 0},
		{"runc needs no RuntimeClass", s.RuntimeClassName == nil},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("Pod not hardened: %s", ck.what)
		}
	}
	sizes := map[string]int64{}
	for _, v := range s.Volumes {
		if v.EmptyDir != nil {
			if v.EmptyDir.Medium != corev1.StorageMediumMemory {
				t.Errorf("volume %s is not memory", v.Name)
			}
			sizes[v.Name] = v.EmptyDir.SizeLimit.Value()
		}
		if v.HostPath != nil || v.Secret != nil || v.Projected != nil {
			t.Errorf("volume %s brings the host or a secret in", v.Name)
		}
	}
	if sizes["workspace"] != 128<<20 || sizes["tmp"] != 64<<20 {
		t.Errorf("workspace and /tmp sizes: %v", sizes)
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.ReadOnly || m.Name == "workspace" || m.Name == "tmp"
	}
	for _, path := range []string{"/workspace", "/tmp", inside.BundlePath, inside.SystemBundlePath, inside.TrustStorePath} {
		if !mounts[path] {
			t.Errorf("%s is not mounted (read-only for the trust files)", path)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["HTTPS_PROXY"] != "http://10.0.0.1:3128" || env["NO_PROXY"] != "" || env["LANG"] != "C.UTF-8" || env["HOME"] != "/workspace" {
		t.Errorf("sandbox environment: %v", env)
	}
	if v, ok := env["KUBERNETES_SERVICE_HOST"]; !ok || v != "" {
		t.Errorf("the API server's address is given to the sandbox: %q", v)
	}
}

// TestRuntimeClasses: a gVisor template runs under its RuntimeClass, and one whose runtime the
// configuration maps to none is refused, naming the setting.
func TestRuntimeClasses(t *testing.T) {
	r := testRuntime(t)
	g := tmpl
	g.Runtime = "runsc"
	p, err := r.Pod(g, "sb-n1-g")
	if err != nil || p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "gvisor" {
		t.Fatalf("runsc template: %v %v", p, err)
	}
	g.Platform = "ptrace"
	if _, err := r.Pod(g, "sb-n1-p"); err == nil || !strings.Contains(err.Error(), "kubernetes.runtime_classes") {
		t.Fatalf("runsc-ptrace with no RuntimeClass: %v", err)
	}
}

// TestStartedSaysWhy: a Pod that will never run fails its create at once with the kubelet's
// reason, one that runs with an address is a sandbox, and one still starting is waited for.
func TestStartedSaysWhy(t *testing.T) {
	pod := func(phase corev1.PodPhase, ip string, st corev1.ContainerState) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, PodIP: ip,
			ContainerStatuses: []corev1.ContainerStatus{{Name: container, State: st}}}}
		p.Name = "sb-n1-x"
		p.Labels = map[string]string{LabelTemplate: "default", LabelNode: "n1"}
		return p
	}
	if _, done, err := started(pod(corev1.PodPending, "", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}})); done || err != nil {
		t.Fatalf("a starting Pod: done %v, %v", done, err)
	}
	_, done, err := started(pod(corev1.PodPending, "", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}))
	if !done || err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("a Pod whose image is missing: done %v, %v", done, err)
	}
	sb, done, err := started(pod(corev1.PodRunning, "10.244.0.9", corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}))
	if !done || err != nil || sb.Addr.String() != "10.244.0.9" || sb.ID != "sb-n1-x" || sb.Template != "default" {
		t.Fatalf("a running Pod: %+v %v %v", sb, done, err)
	}
	if _, done, err := started(pod(corev1.PodFailed, "", corev1.ContainerState{})); !done || err == nil {
		t.Fatalf("a failed Pod: done %v, %v", done, err)
	}
}

// TestShortID: a node name that cannot name Pods, labels and the firewall's chain as it is (a
// Kubernetes node's DNS name, a long one) is spelt as a short DNS label of its own, distinct per
// name; one that can is kept.
func TestShortID(t *testing.T) {
	if got := ShortID("node-1"); got != "node-1" {
		t.Fatalf("ShortID(node-1) = %q", got)
	}
	seen := map[string]string{}
	for _, name := range []string{"ip-10-0-1-23.ec2.internal", "ip-10-0-1-24.ec2.internal", "Node_1", "a-node-name-of-21-chr", "..."} {
		id := ShortID(name)
		if len(id) > 20 || len(validation.IsDNS1123Label(id)) > 0 {
			t.Errorf("ShortID(%q) = %q: not a DNS label of at most 20", name, id)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("%q and %q share %q", name, other, id)
		}
		seen[id] = name
	}
	r, err := New(Config{Node: "ip-10-0-1-23.ec2.internal", NodeName: "k1", Namespace: "s", ProxyURL: "http://10.0.0.1:3128", Resolver: netip.MustParseAddr("10.0.0.1")}, &rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Pod(tmpl, "x")
	if err != nil || p.Labels[LabelNode] != ShortID("ip-10-0-1-23.ec2.internal") {
		t.Fatalf("the Pod's node label: %v %v", p.Labels, err)
	}
}

// TestExecArgv: what a caller names is never read as env's options or as an assignment: a
// variable whose name begins with '-' is set, not obeyed, a command word with '=' is run, and
// the marker follows the caller's variables, so none of them can unset it.
func TestExecArgv(t *testing.T) {
	req := pool.ExecRequest{Workdir: "-w", Env: map[string]string{"-i": "1", "B": "2"}}
	argv, err := execArgv(req, []string{"X=1", "arg"}, "m1")
	if err != nil {
		t.Fatal(err)
	}
	want := `env -C -w -- -i=1 B=2 AIRLOCK_EXEC=m1 sh -c exec "$0" "$@" X=1 arg`
	if got := strings.Join(argv, " "); got != want {
		t.Fatalf("argv:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{"", "A=B", "A\x00"} {
		if _, err := execArgv(pool.ExecRequest{Env: map[string]string{bad: "v"}}, []string{"true"}, ""); err == nil {
			t.Errorf("variable name %q accepted", bad)
		}
	}
}
