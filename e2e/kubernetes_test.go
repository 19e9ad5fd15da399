package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/firewall"
	"github.com/airlock-dev/airlock/pool/kubernetes"
)

// kubeEnv is the test cluster scripts/kube.sh brought up (make test runs it).
type kubeEnv struct{ devstack.KubeCluster }

// kubeCluster reads the cluster's env file (AIRLOCK_KUBE_ENV); the Kubernetes tests are skipped
// only when it is not set, as outside make test.
func kubeCluster(t *testing.T) kubeEnv {
	t.Helper()
	path := os.Getenv("AIRLOCK_KUBE_ENV")
	if path == "" {
		t.Skip("no test cluster: AIRLOCK_KUBE_ENV is not set (make test runs scripts/kube.sh and sets it)")
	}
	k, err := devstack.ReadKubeCluster(path)
	if err != nil {
		t.Fatalf("%v (run scripts/kube.sh)", err)
	}
	return kubeEnv{k}
}

// kubectl runs kubectl against the test cluster.
func (k kubeEnv) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, k.Kubectl, append([]string{"--kubeconfig", k.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// pods lists the Pods of airlock node in the namespace, as name=phase.
func (k kubeEnv) pods(t *testing.T, ns, node string) map[string]string {
	t.Helper()
	out, err := k.kubectl(t, "-n", ns, "get", "pods", "-l", "airlock.dev/node="+node, "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get pods: %v: %s", err, out)
	}
	var pl struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &pl); err != nil {
		t.Fatalf("kubectl get pods: %v", err)
	}
	got := map[string]string{}
	for _, p := range pl.Items {
		if p.Metadata.DeletionTimestamp == nil {
			got[p.Metadata.Name] = p.Status.Phase
		}
	}
	return got
}

// kubeSpec is a node whose backend is the test cluster; its sandboxes are Pods in namespace ns.
func kubeSpec(k kubeEnv, name, bridge, ns string, keep bool) nodeSpec {
	return nodeSpec{Name: name, Network: "airlock-" + name, Bridge: bridge, Subnet: "10.219.0.0/24", MinWarm: 2,
		Extra: fmt.Sprintf(`backend: kubernetes
kubernetes:
  kubeconfig: %q
  namespace: %s
  node_name: airlock-node
  host_addr: %s
  pod_cidr: %s
  firewall_netns: %s
  network_policy: true
  runtime_classes: {runsc: gvisor}
  disable_ipv6: true
pool:
  keep_on_stop: %t
`, k.Kubeconfig, ns, k.HostAddr, k.PodCIDR, k.Netns, keep),
		Templates: "  - {name: gvisor, runtime: runsc, min_warm: 1, max_total: 4, default_ttl: 10m, max_ttl: 1h, wait_for: 1m}\n"}
}

// startKubeNode starts a node on the test cluster in a namespace of its own, removed when t
// ends.
func startKubeNode(t *testing.T, k kubeEnv, name, bridge string, keep bool) (*nodeProc, *upstream, string, string) {
	t.Helper()
	ns := "airlock-" + name
	// An earlier run's namespace may still be going (its deletion is not waited for).
	if out, err := k.kubectl(t, "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=50s"); err != nil {
		t.Fatalf("an earlier run's namespace %s: %v: %s", ns, err, out)
	}
	if out, err := k.kubectl(t, "create", "namespace", ns); err != nil {
		t.Fatalf("kubectl create namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { k.kubectl(t, "delete", "namespace", ns, "--wait=false") })
	up := startUpstream(t)
	dir := t.TempDir()
	spec := kubeSpec(k, name, bridge, ns, keep)
	cfg, err := spec.write(dir, up)
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, spec, dir+"/state", cfg)
	return n, up, ns, cfg
}

// TestKubernetesBackend runs the invariants against a node whose sandboxes are Pods on a real
// cluster: warm leases, commands and files through the exec subresource, no secrets inside,
// one way out (the node firewall in the cluster's network namespace), DNS only through the
// resolver, injection and refusal at the gateway with their audit, release deleting the Pod,
// and the NetworkPolicy made for the node.
func TestKubernetesBackend(t *testing.T) {
	k := kubeCluster(t)
	node, up, ns, _ := startKubeNode(t, k, "e2e-kube", "alk-kube", false)
	for _, tmpl := range []string{"default", "gvisor"} {
		if err := waitUntil(3*time.Minute, "the Kubernetes pool of "+tmpl+" at its target", func() bool {
			_, ok, _ := node.settled(t, tmpl)
			return ok
		}); err != nil {
			out, _, _ := node.cli(t, "pools")
			t.Fatalf("%v: %s\n%s", err, out, node.log)
		}
	}
	for _, rt := range []struct{ name, template string }{{"runc", "default"}, {"gvisor", "gvisor"}} {
		t.Run(rt.name, func(t *testing.T) {
			s := (&shared{nodeProc: node, up: up}).under(rt.template)
			kubeInvariants(t, k, s, ns, rt.name)
		})
	}
}

// kubeInvariants is the suite TestKubernetesBackend runs for each runtime.
func kubeInvariants(t *testing.T, k kubeEnv, s *shared, ns, runtime string) {
	n, up := s.nodeProc, s.up
	t.Run("the sandbox runs under its runtime", func(t *testing.T) {
		l := n.lease(t)
		out, _, _ := n.exec(t, l.ID, "sh", "-c", "dmesg 2>/dev/null | head -3; uname -r")
		if gvisor := strings.Contains(out, "gVisor") || strings.Contains(out, "gvisor"); gvisor != (runtime == "gvisor") {
			t.Fatalf("runtime %s, yet the sandbox's kernel says:\n%s", runtime, out)
		}
	})

	t.Run("a warm lease is a hardened Pod, and commands run in it with their exit codes", func(t *testing.T) {
		if err := waitUntil(2*time.Minute, "the pool of "+n.template+" back at its target", func() bool {
			_, ok, _ := n.settled(t, n.template)
			return ok
		}); err != nil {
			t.Fatal(err)
		}
		l := n.lease(t)
		if l.Start != "warm" {
			t.Fatalf("lease start %q, want warm", l.Start)
		}
		if phase := k.pods(t, ns, n.spec.Name)[l.Sandbox]; phase != "Running" {
			t.Fatalf("the lease's sandbox %s is no running Pod of the node (phase %q)", l.Sandbox, phase)
		}
		out, errs, code := n.exec(t, l.ID, "bash", "-c", `id -u; grep CapEff /proc/self/status; awk '$2 == "/" {split($4, o, ","); print "root mounted " o[1]}' /proc/mounts; ls /var/run/secrets/kubernetes.io 2>&1; echo "$KUBERNETES_SERVICE_HOST"; exit 7`)
		if code != 7 {
			t.Fatalf("exit %d, want 7: %s %s", code, out, errs)
		}
		for _, want := range []string{"10001\n", "CapEff:\t0000000000000000", "root mounted ro\n", "No such file or directory"} {
			if !strings.Contains(out, want) {
				t.Errorf("sandbox lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "10.96.") {
			t.Errorf("the Pod was told the cluster's service addresses:\n%s", out)
		}
	})

	t.Run("a command whose caller goes away is killed with everything it started", func(t *testing.T) {
		l := n.lease(t)
		n.abandonExec(t, l.ID, "sleep 301 & echo started; sleep 301")
		// Killed, not reaped: the Pod's first process is the sandbox's idle sleep, which reaps no
		// orphan, so what was killed stays a zombie (counted under the Pod's pids limit) until the
		// Pod goes. Docker's sandboxes run under its init, which reaps them (exec_test.go).
		var ps string
		if err := waitUntil(10*time.Second, "the abandoned command's processes to be gone", func() bool {
			ps, _, _ = n.exec(t, l.ID, "ps", "-eo", "stat,args")
			return !strings.Contains(ps, "sleep 301")
		}); err != nil {
			t.Fatalf("%v; processes left:\n%s", err, ps)
		}
	})

	t.Run("files go in and come out through the exec subresource", func(t *testing.T) {
		l := n.lease(t)
		if _, errs, code := n.cliStdin(t, strings.NewReader("hello from the host\n"), "cp", "-", l.ID+":notes/a.txt"); code != 0 {
			t.Fatalf("cp in: %s", errs)
		}
		out, errs, code := n.cli(t, "cp", l.ID+":notes/a.txt", "-")
		if code != 0 || out != "hello from the host\n" {
			t.Fatalf("cp out: %q %s", out, errs)
		}
		out, _, code = n.exec(t, l.ID, "cat", "/workspace/notes/a.txt")
		if code != 0 || out != "hello from the host\n" {
			t.Fatalf("the file inside: %q", out)
		}
	})

	t.Run("no secret is inside", func(t *testing.T) {
		secret := s.demoSecret(t)
		l := n.lease(t, "api.example.test=demo")
		out, _, _ := n.exec(t, l.ID, "sh", "-c", "env; cat /proc/1/environ | tr '\\0' '\\n'; grep -rs . /etc/airlock /workspace /tmp | head -c 100000")
		if strings.Contains(out, secret) {
			t.Fatal("the credential's value is inside the Pod")
		}
		for _, leak := range []string{"VAULT_TOKEN", "REDIS_URL", "AIRLOCK_", "KUBERNETES_"} {
			for _, line := range strings.Split(out, "\n") {
				// The kubelet always sets the API server's service variables; the Pod gets them empty.
				if strings.HasPrefix(line, leak) && !strings.HasPrefix(line, "AIRLOCK_EXEC=") && !strings.HasSuffix(line, "=") {
					t.Errorf("the sandbox's environment names %s: %s", leak, line)
				}
			}
		}
	})

	t.Run("one way out: the node's other ports, the API server, the kubelet and other Pods are out of reach", func(t *testing.T) {
		a, b := n.lease(t), n.lease(t)
		other, err := net.Listen("tcp", k.HostAddr+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		accepted := recordAccepts(other)
		if out, code := n.tcpProbe(t, a.ID, k.HostAddr, 3128); code != 0 || !strings.Contains(out, "connected") {
			t.Fatalf("control probe to the gateway failed (exit %d): %s", code, out)
		}
		port := other.Addr().(*net.TCPAddr).Port
		bIP, _, _ := strings.Cut(b.Address, ":")
		for _, target := range []struct {
			what, host string
			port       int
		}{
			{"a host port beside the gateway", k.HostAddr, port},
			{"the API server", k.NodeAddr, 6443},
			{"the kubelet", k.NodeAddr, 10250},
			{"etcd", k.NodeAddr, 2379},
			{"the Docker bridge", "172.17.0.1", 2375},
		} {
			if out, code := n.tcpProbe(t, a.ID, target.host, target.port); code == 0 || strings.Contains(out, "connected") {
				t.Errorf("%s (%s:%d) is reachable from a Pod: %s", target.what, target.host, target.port, out)
			}
		}
		select {
		case from := <-accepted:
			t.Fatalf("a Pod's connection reached a host listener from %s", from)
		default:
		}
		// Another Pod with a live listener: a refused probe must be the firewall's refusal, not
		// an empty port's.
		server := `import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 8080)); s.listen(4)
print("listening", flush=True)
while True:
    c, a = s.accept(); print("accepted", a[0], flush=True); c.close()`
		heard := make(chan string, 1)
		go func() {
			out, _, _ := n.exec(t, b.ID, "timeout", "8", "python3", "-c", server)
			heard <- out
		}()
		if err := waitUntil(10*time.Second, "the listener in the other Pod", func() bool {
			_, code := n.tcpProbe(t, b.ID, "127.0.0.1", 8080)
			return code == 0
		}); err != nil {
			t.Fatal(err)
		}
		if out, code := n.tcpProbe(t, a.ID, bIP, 8080); code == 0 || strings.Contains(out, "connected") {
			t.Errorf("a Pod reaches another Pod's listener: %s", out)
		}
		if out := <-heard; strings.Count(out, "accepted") != 1 { // its own probe, from loopback
			t.Errorf("the other Pod's listener heard from a Pod:\n%s", out)
		}
	})

	t.Run("DNS goes only through the node's resolver", func(t *testing.T) {
		l := n.lease(t, "api.example.test")
		out, _, code := n.exec(t, l.ID, "cat", "/etc/resolv.conf")
		if code != 0 || !strings.Contains(out, "nameserver "+k.HostAddr) || strings.Count(out, "nameserver") != 1 || strings.Contains(out, "search") {
			t.Fatalf("resolv.conf is not the node's resolver alone:\n%s", out)
		}
		// A resolver of the Pod's choosing beside it is out of reach: a UDP listener on the
		// node's address at another port hears nothing.
		pc, err := net.ListenPacket("udp", k.HostAddr+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		p := pc.LocalAddr().(*net.UDPAddr).Port
		n.exec(t, l.ID, "bash", "-c", "echo query > /dev/udp/"+k.HostAddr+"/"+strconv.Itoa(p))
		pc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, from, err := pc.ReadFrom(make([]byte, 64)); err == nil {
			t.Fatalf("a Pod's UDP datagram reached a host port other than the resolver's, from %s", from)
		}
		// An allowed name resolves through the resolver; one the task was not granted does not.
		if out, errs, code := n.exec(t, l.ID, "getent", "hosts", "api.example.test"); code != 0 {
			t.Fatalf("an allowed name does not resolve: %s %s", out, errs)
		}
		if out, _, code := n.exec(t, l.ID, "getent", "hosts", "denied.example.test"); code == 0 {
			t.Fatalf("a name outside the task's scopes resolved: %s", out)
		}
	})

	t.Run("the gateway injects the credential and explains a refusal, with the audit under the lease", func(t *testing.T) {
		secret := s.demoSecret(t)
		l := n.lease(t, "api.example.test=demo")
		out, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami")
		if code != 0 || !strings.Contains(out, "whoami ok") {
			t.Fatalf("curl through the gateway: exit %d, out %q, err %q", code, out, errs)
		}
		if seen := up.seen(); len(seen) == 0 || seen[len(seen)-1] != "Bearer "+secret {
			t.Fatalf("upstream saw Authorization %q, want the Vault credential", seen)
		}
		out, _, code = n.exec(t, l.ID, "curl", "-sS", "-o", "/dev/stderr", "-w", "%{http_code}", "https://other.example.test/")
		if code == 0 && !strings.Contains(out, "403") {
			t.Fatalf("a request outside the task's scopes was not refused: %q", out)
		}
		recs := n.trailUntil(t, l.ID, func(rs []audit.Record) bool {
			var allowed, denied bool
			for _, r := range rs {
				allowed = allowed || (r.Kind == audit.KindHTTP && r.Host == "api.example.test" && r.Decision == audit.Allow)
				denied = denied || (r.Host == "other.example.test" && r.Decision == audit.Deny)
			}
			return allowed && denied
		})
		for _, r := range recs {
			if r.Sandbox != "" && r.Sandbox != l.Sandbox {
				t.Fatalf("a record of lease %s names sandbox %s, not its Pod %s", l.ID, r.Sandbox, l.Sandbox)
			}
		}
	})

	t.Run("release deletes the Pod", func(t *testing.T) {
		l := n.leaseWith(t)
		if _, errs, code := n.cli(t, "release", l.ID); code != 0 {
			t.Fatalf("release: %s", errs)
		}
		if err := waitUntil(30*time.Second, "the released lease's Pod to be deleted", func() bool {
			_, ok := k.pods(t, ns, n.spec.Name)[l.Sandbox]
			return !ok
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the node's NetworkPolicy lets its Pods out only to the gateway and the resolver", func(t *testing.T) {
		out, err := k.kubectl(t, "-n", ns, "get", "networkpolicy", "airlock-sandboxes-"+n.spec.Name, "-o", "json")
		if err != nil {
			t.Fatalf("kubectl get networkpolicy: %v: %s", err, out)
		}
		var np struct {
			Spec struct {
				PodSelector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"podSelector"`
				PolicyTypes []string          `json:"policyTypes"`
				Ingress     []json.RawMessage `json:"ingress"`
				Egress      []struct {
					To []struct {
						IPBlock struct {
							CIDR string `json:"cidr"`
						} `json:"ipBlock"`
					} `json:"to"`
					Ports []struct {
						Protocol string `json:"protocol"`
						Port     int    `json:"port"`
					} `json:"ports"`
				} `json:"egress"`
			} `json:"spec"`
		}
		if err := json.Unmarshal([]byte(out), &np); err != nil {
			t.Fatal(err)
		}
		sp := np.Spec
		if sp.PodSelector.MatchLabels["airlock.dev/node"] != n.spec.Name || len(sp.Ingress) != 0 ||
			strings.Join(sp.PolicyTypes, ",") != "Ingress,Egress" || len(sp.Egress) != 1 ||
			len(sp.Egress[0].To) != 1 || sp.Egress[0].To[0].IPBlock.CIDR != k.HostAddr+"/32" {
			t.Fatalf("NetworkPolicy does not confine the node's Pods to its address:\n%s", out)
		}
		var ports []string
		for _, p := range sp.Egress[0].Ports {
			ports = append(ports, p.Protocol+"/"+strconv.Itoa(p.Port))
		}
		if strings.Join(ports, " ") != "TCP/3128 UDP/53 TCP/53" { // no transparent port: the node's namespace is not the agent's
			t.Fatalf("NetworkPolicy opens %v, want the gateway and the resolver alone", ports)
		}
	})
}

// TestKubernetesNodeAdoptsItsPods restarts a node that keeps its sandboxes: the leased Pod and
// the warm ones are adopted by their labels, the lease still runs commands in the same Pod, and
// no Pod is made twice.
func TestKubernetesNodeAdoptsItsPods(t *testing.T) {
	k := kubeCluster(t)
	n, _, ns, cfg := startKubeNode(t, k, "e2e-kube-keep", "alk-kkeep", true)
	// A node that keeps its sandboxes keeps their confinement when it stops; the test removes
	// it at the end, or it would confine every later node's Pods on this cluster node too.
	t.Cleanup(func() {
		fw := &firewall.Firewall{Chain: "AIRLOCK-" + n.spec.Name, Source: netip.MustParsePrefix(k.PodCIDR), Netns: k.Netns}
		if err := fw.Remove(); err != nil {
			t.Errorf("removing the kept node's firewall: %v", err)
		}
	})
	l := n.lease(t)
	n.exec(t, l.ID, "sh", "-c", "echo kept > /workspace/mark")
	// The refill replaces the leased one first: a Pod still being made at stop is deleted, not
	// kept, so the count is taken once the pool is whole again.
	var before map[string]string
	if err := waitUntil(2*time.Minute, "the leased Pod and the warm ones running", func() bool {
		before = k.pods(t, ns, n.spec.Name)
		for _, phase := range before {
			if phase != "Running" {
				return false
			}
		}
		_, def, _ := n.settled(t, "default")
		_, gv, _ := n.settled(t, "gvisor")
		return def && gv && len(before) == 4 // one leased, two warm, one warm under gVisor
	}); err != nil {
		t.Fatalf("%v: %v", err, before)
	}
	if err := n.shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := k.pods(t, ns, n.spec.Name); len(got) != len(before) {
		t.Fatalf("a node that keeps its sandboxes deleted Pods at stop: %v, then %v", before, got)
	}
	n2 := startNode(t, n.spec, n.state, cfg)
	out, errs, code := n2.exec(t, l.ID, "cat", "/workspace/mark")
	if code != 0 || out != "kept\n" {
		t.Fatalf("the lease's Pod after a restart: exit %d, %q %s", code, out, errs)
	}
	// A refill that wrongly replaced the adopted warm Pods has done so once a pass of every
	// pool has ended since the restart (each began after the node adopted what it found).
	eventually(t, time.Minute, "a refill pass of every pool since the restart", func() bool {
		out, _, code := n2.cli(t, "pools", "--json")
		var ps []pool.PoolStatus
		if code != 0 || json.Unmarshal([]byte(out), &ps) != nil || len(ps) == 0 {
			return false
		}
		for _, p := range ps {
			if p.Refills == 0 {
				return false
			}
		}
		return true
	})
	if got := k.pods(t, ns, n.spec.Name); len(got) != len(before) {
		t.Fatalf("the restarted node did not adopt its Pods: %v before, %v after", before, got)
	}
	if _, errs, code := n2.cli(t, "release", l.ID); code != 0 {
		t.Fatalf("release: %s", errs)
	}
}

// TestKubernetesManifests proves deploy/kubernetes on the test cluster: the kustomization
// builds, its objects are accepted by the API server (the DaemonSet by a server-side dry run,
// since no agent image is published here), its configuration loads, and its RBAC is what the
// backend needs and no more: the backend, running with nothing but the agent's service account
// token, reads its Node, writes its ConfigMap and NetworkPolicy, makes a Pod, runs a command in
// it and deletes it, while Secrets, other namespaces and Nodes beyond reading stay refused.
func TestKubernetesManifests(t *testing.T) {
	k := kubeCluster(t)
	const dir = "../deploy/kubernetes"
	if out, err := k.kubectl(t, "kustomize", dir); err != nil || !strings.Contains(out, "kind: DaemonSet") {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "runtimeclass.yaml", "config.yaml"} {
		if out, err := k.kubectl(t, "apply", "-f", dir+"/"+f); err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", f, err, out)
		}
	}
	if out, err := k.kubectl(t, "apply", "--dry-run=server", "-f", dir+"/daemonset.yaml"); err != nil {
		t.Fatalf("the API server refuses the DaemonSet: %v\n%s", err, out)
	}

	t.Run("the configuration loads", func(t *testing.T) {
		out, err := k.kubectl(t, "-n", "airlock-system", "get", "configmap", "airlock-config", "-o", "jsonpath={.data.airlock\\.yaml}")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		dir := t.TempDir()
		_, cert, key := apiCert(t, dir) // the Secret airlock-api-tls, mounted
		out = strings.NewReplacer("/etc/airlock/api-tls/tls.crt", cert, "/etc/airlock/api-tls/tls.key", key).Replace(out)
		path := dir + "/airlock.yaml"
		os.WriteFile(path, []byte(out), 0o600)
		t.Setenv("NODE_NAME", "airlock-node")
		t.Setenv("AIRLOCK_NODE", "airlock-node")
		c, err := config.Load(path)
		if err != nil {
			t.Fatalf("the DaemonSet's configuration does not load: %v", err)
		}
		if c.Backend != "kubernetes" || c.Node != "airlock-node" || c.Dev.Issuer {
			t.Fatalf("loaded as backend %q, node %q, dev issuer %v", c.Backend, c.Node, c.Dev.Issuer)
		}
	})

	as := "system:serviceaccount:airlock-system:airlock-agent"
	t.Run("the agent may do what the backend needs and no more", func(t *testing.T) {
		for _, c := range []struct {
			verb, resource, ns string
			want               bool
		}{
			{"create", "pods", "airlock-sandboxes", true},
			{"delete", "pods", "airlock-sandboxes", true},
			{"create", "pods/exec", "airlock-sandboxes", true},
			{"update", "configmaps", "airlock-sandboxes", true},
			{"create", "networkpolicies.networking.k8s.io", "airlock-sandboxes", true},
			{"get", "nodes", "", true},
			{"get", "secrets", "airlock-sandboxes", false},
			{"list", "secrets", "airlock-system", false},
			{"create", "pods", "default", false},
			{"create", "pods/exec", "airlock-system", false},
			{"update", "nodes", "", false},
			{"create", "pods/attach", "airlock-sandboxes", false},
			{"create", "serviceaccounts/token", "airlock-system", false},
			{"patch", "pods", "airlock-sandboxes", false},
		} {
			// kubectl reads TYPE/NAME: a subresource is asked with --subresource.
			resource, sub, _ := strings.Cut(c.resource, "/")
			args := []string{"auth", "can-i", c.verb, resource, "--as", as}
			if sub != "" {
				args = append(args, "--subresource", sub)
			}
			if c.ns != "" {
				args = append(args, "-n", c.ns)
			}
			out, _ := k.kubectl(t, args...)
			lines := strings.Split(strings.TrimSpace(out), "\n") // a warning may come first
			answer := lines[len(lines)-1]
			if answer != "yes" && answer != "no" {
				t.Fatalf("kubectl auth can-i %v: %s", args, out)
			}
			if got := answer == "yes"; got != c.want {
				t.Errorf("the agent may %s %s in %q: %s (want %v)", c.verb, c.resource, c.ns, answer, c.want)
			}
		}
	})

	t.Run("the backend works with the agent's service account alone", func(t *testing.T) {
		tok, err := k.kubectl(t, "-n", "airlock-system", "create", "token", "airlock-agent", "--duration", "10m")
		if err != nil {
			t.Fatalf("kubectl create token: %v: %s", err, tok)
		}
		server, _ := k.kubectl(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
		caFile, _ := k.kubectl(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.certificate-authority}")
		kc := t.TempDir() + "/agent.kubeconfig"
		os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: agent, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: agent}}]
current-context: c
`, server, caFile, strings.TrimSpace(tok))), 0o600)
		ctx := context.Background()
		b, err := kubernetes.NewBackend(kubernetes.BackendConfig{
			Node: "e2e-rbac", NodeName: "airlock-node", Namespace: "airlock-sandboxes", Kubeconfig: kc,
			HostAddr: netip.MustParseAddr(k.HostAddr), FirewallNetns: k.Netns, // the Pod network from the Node object
			GatewayPort: 3128, ResolverPort: 53, NetworkPolicy: true, DisableIPv6: true,
		})
		if err != nil {
			t.Fatalf("the backend with the agent's token: %v", err)
		}
		if err := b.Setup(ctx); err != nil {
			t.Fatalf("setup with the agent's token: %v", err)
		}
		defer b.Teardown(ctx)
		sb, err := b.Create(ctx, pool.Template{Name: "default", Image: "airlock/default:latest", User: "10001:10001",
			Workdir: "/workspace", CPUs: 1, MemoryMB: 256, WorkspaceMB: 32, TmpMB: 32})
		if err != nil {
			t.Fatalf("a Pod with the agent's token: %v", err)
		}
		defer b.Destroy(ctx, sb.ID)
		var out strings.Builder
		code, err := b.Exec(ctx, sb, pool.ExecRequest{Cmd: []string{"sh", "-c", "echo inside; exit 3"}}, nil, &out, &out)
		if err != nil || code != 3 || out.String() != "inside\n" {
			t.Fatalf("exec with the agent's token: %d %v %q", code, err, out.String())
		}
		if err := b.Destroy(ctx, sb.ID); err != nil {
			t.Fatalf("delete with the agent's token: %v", err)
		}
	})
}
