package devstack

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// KubeCluster is the test cluster scripts/kube.sh (make kube) brings up, as its env file says:
// the admin kubeconfig and kubectl, the node's address as its Pods reach it (HostAddr), the
// node's own (NodeAddr), its Pod network and the network namespace that holds it.
type KubeCluster struct {
	Kubeconfig, Kubectl, HostAddr, NodeAddr, PodCIDR, Netns string
}

// ReadKubeCluster reads the env file at path, refusing one that lacks a setting the tests and
// benchmarks need.
func ReadKubeCluster(path string) (KubeCluster, error) {
	f, err := os.Open(path)
	if err != nil {
		return KubeCluster{}, fmt.Errorf("the test cluster's env file: %w (make kube writes it)", err)
	}
	defer f.Close()
	v := map[string]string{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if k, val, ok := strings.Cut(sc.Text(), "="); ok {
			v[k] = val
		}
	}
	k := KubeCluster{Kubeconfig: v["KUBECONFIG"], Kubectl: v["KUBECTL"], HostAddr: v["HOST_ADDR"],
		NodeAddr: v["NODE_ADDR"], PodCIDR: v["POD_CIDR"], Netns: v["NETNS"]}
	if k.Kubeconfig == "" || k.Kubectl == "" || k.HostAddr == "" || k.PodCIDR == "" {
		return k, fmt.Errorf("the test cluster's env file %s lacks a setting: %+v", path, k)
	}
	return k, nil
}
