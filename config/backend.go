package config

import (
	"net/netip"
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
