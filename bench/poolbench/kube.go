package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/pool/kubernetes"
)

// kubeCluster is the test cluster scripts/kube.sh brings up.
type kubeCluster struct{ devstack.KubeCluster }

// readKubeEnv reads scripts/kube.sh's env file.
func readKubeEnv(path string) (*kubeCluster, error) {
	k, err := devstack.ReadKubeCluster(path)
	if err != nil {
		return nil, err
	}
	return &kubeCluster{k}, nil
}

// config is the node's kubernetes section for this cluster, in the namespace airlock-bench.
func (k *kubeCluster) config() config.Kubernetes {
	return config.Kubernetes{Kubeconfig: k.Kubeconfig, Namespace: "airlock-bench", NodeName: "airlock-node",
		HostAddr: k.HostAddr, PodCIDR: k.PodCIDR, FirewallNetns: k.Netns,
		RuntimeClasses: map[string]string{"runsc": "gvisor"}, DisableIPv6: true}
}

// namespace makes ns unless it exists.
func (k *kubeCluster) namespace(ctx context.Context, ns string) error {
	rc, err := kubernetes.RESTConfig(k.Kubeconfig)
	if err != nil {
		return err
	}
	rt, err := kubernetes.New(kubernetes.Config{Node: "poolbench", NodeName: "airlock-node", Namespace: ns,
		ProxyURL: "http://" + k.HostAddr + ":3128", Resolver: netip.MustParseAddr(k.HostAddr)}, rc)
	if err != nil {
		return err
	}
	_, err = rt.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	return nil
}

// kubeCold starts n Pods of the default image in a row under each runtime (runc, and runsc as
// the gvisor RuntimeClass), each timed from the API call to running with an address (what the
// refill waits for), then reads each idle Pod's memory from its cgroup on the node.
func kubeCold(ctx context.Context, k *kubeCluster, n int, rts []string, figs figures) error {
	kc := k.config()
	if err := k.namespace(ctx, kc.Namespace); err != nil {
		return err
	}
	b, err := kubernetes.NewBackend(kubernetes.BackendConfig{Node: "poolbench-cold", NodeName: kc.NodeName, Namespace: kc.Namespace,
		Kubeconfig: kc.Kubeconfig, HostAddr: netip.MustParseAddr(kc.HostAddr), PodCIDR: netip.MustParsePrefix(kc.PodCIDR),
		FirewallNetns: kc.FirewallNetns, GatewayPort: 3128, ResolverPort: 53, RuntimeClasses: kc.RuntimeClasses, DisableIPv6: true})
	if err != nil {
		return err
	}
	if err := b.Setup(ctx); err != nil {
		return err
	}
	defer b.Teardown(context.WithoutCancel(ctx))
	for _, rt := range rts {
		t := benchTemplate("airlock/default:latest", rt)
		var took []time.Duration
		var ids []string
		for range n {
			s := time.Now()
			sb, err := b.Create(ctx, t)
			if err != nil {
				for _, id := range ids {
					b.Destroy(context.WithoutCancel(ctx), id)
				}
				return fmt.Errorf("a cold Pod under %s: %w", rt, err)
			}
			took = append(took, time.Since(s))
			ids = append(ids, sb.ID)
		}
		time.Sleep(2 * time.Second) // let the idle sandboxes settle, as the Docker figure does
		var mem []float64
		for _, id := range ids {
			if v, err := podMemory(ctx, b, kc.Namespace, id); err == nil {
				mem = append(mem, v)
			} else {
				fmt.Fprintf(os.Stderr, "poolbench: memory of Pod %s: %v\n", id, err)
			}
			b.Destroy(context.WithoutCancel(ctx), id)
		}
		slices.Sort(mem)
		class := "runc"
		if rt != "runc" {
			class = "gvisor (" + rt + ")"
		}
		fmt.Printf("airlock/default:latest as a Pod, RuntimeClass %s: cold start (create to running with an address, %d in a row): p50 %.0f ms, p99 %.0f ms\n",
			class, n, ms(pct(took, 0.5)), ms(pct(took, 0.99)))
		figs.set("k8s-"+rt, "cold start p50", ms(pct(took, 0.5)))
		figs.set("k8s-"+rt, "cold start p99", ms(pct(took, 0.99)))
		if len(mem) > 0 {
			fmt.Printf("Memory per idle warm Pod (its cgroup: usage less inactive file pages): median %.2f MiB, max %.2f MiB\n\n", mem[len(mem)/2], mem[len(mem)-1])
			figs.set("k8s-"+rt, "idle memory MiB (median)", mem[len(mem)/2])
		}
	}
	return nil
}

// podMemory is what the Pod's cgroup holds, as docker stats counts it: usage less the
// inactive file cache (cgroup v1, the kubelet's cgroupfs driver; this machine's layout).
func podMemory(ctx context.Context, b *kubernetes.Backend, ns, name string) (float64, error) {
	p, err := b.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	qos := strings.ToLower(string(p.Status.QOSClass))
	dirs, _ := filepath.Glob("/sys/fs/cgroup/memory/kubepods*/" + qos + "/pod" + string(p.UID))
	if len(dirs) == 0 {
		dirs, _ = filepath.Glob("/sys/fs/cgroup/memory/kubepods*/pod" + string(p.UID))
	}
	if len(dirs) == 0 {
		return 0, fmt.Errorf("no memory cgroup for Pod UID %s", p.UID)
	}
	usage, err := readUint(filepath.Join(dirs[0], "memory.usage_in_bytes"))
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile(filepath.Join(dirs[0], "memory.stat"))
	if err != nil {
		return 0, err
	}
	var inactive uint64
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "total_inactive_file "); ok {
			inactive, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	return float64(usage-min(inactive, usage)) / (1 << 20), nil
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}
