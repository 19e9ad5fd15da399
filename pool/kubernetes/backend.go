package kubernetes

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/firewall"
	"github.com/airlock-dev/airlock/pool/inside"
)

// BackendConfig is what a node's Kubernetes backend needs.
type BackendConfig struct {
	Node      string
	NodeName  string // the Kubernetes node this agent runs on
	Namespace string
	// Kubeconfig is the API server's kubeconfig; empty means the Pod's service account.
	Kubeconfig string
	// HostAddr is the node's address as its Pods reach it: the gateway and the resolver listen
	// there (GatewayPort, ResolverPort; TransparentPort when above zero).
	HostAddr                               netip.Addr
	GatewayPort, ResolverPort, Transparent int
	// PodCIDR is the node's Pod network: the firewall confines what comes from it.
	PodCIDR netip.Prefix
	// FirewallNetns, when set, is the network namespace of the node's Pod network (a name
	// under /run/netns), where it is not the one airlock runs in.
	FirewallNetns string
	// NetworkPolicy also makes a NetworkPolicy for the node's Pods, for clusters whose network
	// plugin enforces one (the firewall is made either way).
	NetworkPolicy  bool
	RuntimeClasses map[string]string
	DisableIPv6    bool
	CAPEM          []byte
	KeepOnStop     bool
}

// Backend is the Kubernetes pool.Backend: the Runtime, the ConfigMap every Pod mounts, the
// node's firewall for its Pod network and, where asked, a NetworkPolicy.
type Backend struct {
	*Runtime
	cfg BackendConfig
	fw  *firewall.Firewall
}

var _ pool.Backend = (*Backend)(nil)

// NewBackend connects to the API server. Nothing is made before Setup.
func NewBackend(cfg BackendConfig) (*Backend, error) {
	rc, err := RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if !cfg.PodCIDR.IsValid() || !cfg.HostAddr.IsValid() {
		if err := fromNode(rc, &cfg); err != nil {
			return nil, err
		}
	}
	rt, err := New(Config{Node: cfg.Node, NodeName: cfg.NodeName, Namespace: cfg.Namespace,
		ProxyURL: "http://" + net.JoinHostPort(cfg.HostAddr.String(), strconv.Itoa(cfg.GatewayPort)),
		Resolver: cfg.HostAddr, RuntimeClasses: cfg.RuntimeClasses, DisableIPv6: cfg.DisableIPv6}, rc)
	if err != nil {
		return nil, err
	}
	return &Backend{Runtime: rt, cfg: cfg, fw: &firewall.Firewall{
		Chain: "AIRLOCK-" + rt.id, Source: cfg.PodCIDR.Masked(), Forward: true, Netns: cfg.FirewallNetns,
		Host: cfg.HostAddr, Gateway: cfg.GatewayPort, DNS: cfg.ResolverPort, Transparent: cfg.Transparent,
	}}, nil
}

// fromNode fills in what cfg lacks of the node's address and Pod network from its Node object:
// the first InternalIP, and spec.podCIDR (IPv4).
func fromNode(rc *rest.Config, cfg *BackendConfig) error {
	cli, err := k8s.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cli.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes: reading Node %s for the settings left empty (kubernetes.host_addr, kubernetes.pod_cidr): %w", cfg.NodeName, err)
	}
	if !cfg.HostAddr.IsValid() {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); a.Type == corev1.NodeInternalIP && err == nil && ip.Is4() {
				cfg.HostAddr = ip
				break
			}
		}
	}
	if !cfg.PodCIDR.IsValid() {
		for _, c := range append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...) {
			if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() {
				cfg.PodCIDR = p.Masked()
				break
			}
		}
	}
	switch {
	case !cfg.HostAddr.IsValid():
		return fmt.Errorf("kubernetes: Node %s has no IPv4 InternalIP; set kubernetes.host_addr", cfg.NodeName)
	case !cfg.PodCIDR.IsValid():
		return fmt.Errorf("kubernetes: Node %s has no IPv4 spec.podCIDR (the cluster does not allocate Pod networks per node); set kubernetes.pod_cidr", cfg.NodeName)
	}
	return nil
}

// HostAddr is where the node's Pods reach its gateway and resolver.
func (b *Backend) HostAddr() netip.Addr { return b.cfg.HostAddr }

// Setup confines the Pod network first (no Pod of this node runs unconfined, not even one an
// earlier run left), writes the trust ConfigMap, makes the NetworkPolicy where asked, and
// deletes an earlier run's Pods unless they are kept, to be adopted.
func (b *Backend) Setup(ctx context.Context) error {
	if err := b.fw.Apply(); err != nil {
		return fmt.Errorf("node firewall: %w", err)
	}
	bundle, p12, err := inside.Bundle(b.cfg.CAPEM)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: TrustConfigMap(b.id), Namespace: b.cfg.Namespace,
			Labels: map[string]string{LabelManaged: "true", LabelNode: b.id}},
		Data:       map[string]string{"ca-bundle.pem": string(bundle)},
		BinaryData: map[string][]byte{"ca-truststore.p12": p12},
	}
	if err := apply(ctx, b.cli.CoreV1().ConfigMaps(b.cfg.Namespace), cm); err != nil {
		return fmt.Errorf("kubernetes: the trust ConfigMap: %w", err)
	}
	if b.cfg.NetworkPolicy {
		if err := apply(ctx, b.cli.NetworkingV1().NetworkPolicies(b.cfg.Namespace), b.NetworkPolicy()); err != nil {
			return fmt.Errorf("kubernetes: the NetworkPolicy: %w", err)
		}
	}
	if !b.cfg.KeepOnStop {
		return pool.DestroyAll(ctx, b.Runtime)
	}
	return nil
}

// Teardown removes the firewall rules, unless the node keeps its sandboxes, which then stay
// confined while it is down. The ConfigMap and the NetworkPolicy stay: they hold no secret,
// and a Pod still running keeps its confinement.
func (b *Backend) Teardown(ctx context.Context) error {
	if b.cfg.KeepOnStop {
		return nil
	}
	return b.fw.Remove()
}

// NetworkPolicy is the policy that confines this node's Pods where the network plugin enforces
// one: no connection in, and out only to the node's gateway and resolver. The firewall says the
// same in the node's kernel; the policy carries it to plugins that bypass the node's iptables.
func (b *Backend) NetworkPolicy() *networkingv1.NetworkPolicy {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(p corev1.Protocol, n int) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(int32(n))
		return networkingv1.NetworkPolicyPort{Protocol: &p, Port: &v}
	}
	ports := []networkingv1.NetworkPolicyPort{port(tcp, b.cfg.GatewayPort), port(udp, b.cfg.ResolverPort), port(tcp, b.cfg.ResolverPort)}
	if b.cfg.Transparent > 0 {
		ports = append(ports, port(tcp, b.cfg.Transparent))
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-sandboxes-" + b.id, Namespace: b.cfg.Namespace,
			Labels: map[string]string{LabelManaged: "true", LabelNode: b.id}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "true", LabelNode: b.id}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     nil, // none: nothing connects to a sandbox
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(b.cfg.HostAddr, 32).String()}}},
				Ports: ports,
			}},
		},
	}
}

// applier is the part of a typed client apply needs.
type applier[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// apply creates obj, or replaces the one of its name.
func apply[T any](ctx context.Context, c applier[T], obj T) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.Update(ctx, obj, metav1.UpdateOptions{})
	}
	return err
}
