package config

import (
	"net/netip"
	"os"
	"strings"
)

// Network is the sandbox network.
type Network struct {
	Name   string `yaml:"name"`
	Bridge string `yaml:"bridge"`
	Subnet string `yaml:"subnet"`
}

// Subnet returns the parsed sandbox subnet; call after Validate.
func (c *Config) Subnet() netip.Prefix { return netip.MustParsePrefix(c.Network.Subnet) }

// Kubernetes is the Kubernetes backend: the node agent runs on one Kubernetes node (a
// DaemonSet, host network) and keeps its sandboxes as Pods placed on that node.
type Kubernetes struct {
	// Kubeconfig reaches the API server; empty means the agent's own service account.
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds the sandboxes' Pods (the agent's RBAC is limited to it).
	Namespace string `yaml:"namespace"`
	// NodeName is the Kubernetes node the Pods are placed on; empty means $NODE_NAME (the
	// DaemonSet sets it from spec.nodeName).
	NodeName string `yaml:"node_name"`
	// HostAddr is the node's address as its Pods reach it; the gateway and the resolver listen
	// there. PodCIDR is the node's Pod network, which the node firewall confines. Empty: read
	// from the Node object (its InternalIP and spec.podCIDR).
	HostAddr string `yaml:"host_addr"`
	PodCIDR  string `yaml:"pod_cidr"`
	// FirewallNetns, when set, names the network namespace (under /run/netns) that holds the
	// node's Pod network, where it is not the agent's own.
	FirewallNetns string `yaml:"firewall_netns"`
	// NetworkPolicy also makes a NetworkPolicy that confines the Pods the same way, for network
	// plugins that enforce one (the node firewall is made either way).
	NetworkPolicy bool `yaml:"network_policy"`
	// RuntimeClasses maps a template's runtime (runsc, runsc-ptrace, runsc-kvm) to the
	// RuntimeClass its Pods run under.
	RuntimeClasses map[string]string `yaml:"runtime_classes"`
	// DisableIPv6 turns IPv6 off in every Pod (the kubelet must allow the sysctls
	// net.ipv6.conf.all.disable_ipv6 and net.ipv6.conf.default.disable_ipv6).
	DisableIPv6 bool `yaml:"disable_ipv6"`
}

// validate checks the sandbox network, whichever the backend (as it always has been).
func (n Network) validate(bad badFunc) {
	if n.Name == "" {
		bad("network.name", "required")
	}
	if l := len(n.Bridge); l == 0 || l > 15 {
		bad("network.bridge", "must be 1 to 15 characters (a Linux interface name)")
	}
	if p, err := netip.ParsePrefix(n.Subnet); err != nil || !p.Addr().Is4() || p.Bits() > 28 || p.Masked() != p {
		bad("network.subnet", "%q is not an IPv4 network such as 10.213.0.0/24", n.Subnet)
	}
}

// validate checks the Kubernetes backend's settings; Config.Validate asks only when backend is
// kubernetes, since no other backend reads them. The node's name may come from NODE_NAME.
func (k Kubernetes) validate(bad badFunc) {
	if k.Namespace == "" {
		bad("kubernetes.namespace", "required with backend kubernetes")
	}
	if k.NodeName == "" && os.Getenv("NODE_NAME") == "" {
		bad("kubernetes.node_name", "required with backend kubernetes (or NODE_NAME in the environment)")
	}
	if a, err := netip.ParseAddr(k.HostAddr); k.HostAddr != "" && (err != nil || !a.Is4()) {
		bad("kubernetes.host_addr", "%q is not the IPv4 address at which the node's Pods reach it", k.HostAddr)
	}
	if p, err := netip.ParsePrefix(k.PodCIDR); k.PodCIDR != "" && (err != nil || !p.Addr().Is4() || p.Masked() != p) {
		bad("kubernetes.pod_cidr", "%q is not the node's IPv4 Pod network such as 10.244.0.0/24", k.PodCIDR)
	}
	if strings.ContainsAny(k.FirewallNetns, "/\x00") || k.FirewallNetns == "." || k.FirewallNetns == ".." {
		bad("kubernetes.firewall_netns", "%q is not a network namespace name", k.FirewallNetns)
	}
	for rt, class := range k.RuntimeClasses {
		if !(strings.HasPrefix(rt, "runsc") || rt == "crun") || class == "" {
			bad("kubernetes.runtime_classes", "%q: %q must map a runsc runtime or crun to a RuntimeClass name", rt, class)
		}
	}
}
