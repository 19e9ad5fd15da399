package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/firewall"
	"github.com/airlock-dev/airlock/pool/inside"
)

// BackendConfig is what a node's Docker backend needs.
type BackendConfig struct {
	Node string
	// Network is the internal Docker network's name; Bridge its host interface name (at most 15
	// characters); Subnet is pinned so the host's address on it is known before it exists.
	Network string
	Bridge  string
	Subnet  netip.Prefix
	// GatewayPort and ResolverPort are the ports the node's gateway and resolver listen on, at
	// HostAddr: the only ones the firewall lets sandboxes reach on the host.
	GatewayPort, ResolverPort int
	// TransparentPort, when above zero, is where the firewall redirects sandboxes' TCP to ports
	// 80 and 443 of any address (the gateway serves it).
	TransparentPort int
	// StateDir is where the backend writes what it mounts into every sandbox (the CA bundle and
	// resolv.conf); CAPEM is the deployment CA the bundle adds to the host's roots.
	StateDir string
	CAPEM    []byte
	// KeepOnStop keeps sandboxes, network and firewall across a stop of the node.
	KeepOnStop bool
	// Templates are the node's templates; Setup fails, naming each, when the engine cannot run
	// one's runtime (CannotRun).
	Templates []pool.Template
}

// Backend is the Docker pool.Backend: the Runtime, the internal sandbox network, and the host
// firewall rules that confine what sandboxes reach on the host.
type Backend struct {
	*Runtime
	cfg BackendConfig
	fw  *firewall.Firewall
}

var (
	_ pool.Backend      = (*Backend)(nil)
	_ pool.ImageBuilder = (*Backend)(nil)
)

// NewBackend connects to the engine (DOCKER_HOST or the default socket). Nothing is created
// before Setup.
func NewBackend(cfg BackendConfig) (*Backend, error) {
	host := cfg.Subnet.Addr().Next()
	rt, err := New(Config{
		Node: cfg.Node, Network: cfg.Network, Bridge: cfg.Bridge, Subnet: cfg.Subnet,
		ProxyURL: "http://" + net.JoinHostPort(host.String(), strconv.Itoa(cfg.GatewayPort)),
		CABundle: filepath.Join(cfg.StateDir, "ca-bundle.pem"), TrustStore: filepath.Join(cfg.StateDir, "ca-truststore.p12"),
		ResolvConf: filepath.Join(cfg.StateDir, "resolv.conf"), Agent: SelfAgent(),
	})
	if err != nil {
		return nil, err
	}
	return &Backend{Runtime: rt, cfg: cfg,
		fw: &firewall.Firewall{Chain: "AIRLOCK-" + cfg.Node, Bridge: cfg.Bridge, Ports: portPattern(cfg.Subnet), Host: host, Gateway: cfg.GatewayPort, DNS: cfg.ResolverPort,
			Transparent: cfg.TransparentPort}}, nil
}

// Setup writes the files every sandbox mounts, checks the engine, clears an earlier run's
// sandboxes (unless they are kept, to be adopted), and makes the network and the firewall.
func (b *Backend) Setup(ctx context.Context) error {
	if err := writeBundle(b.cfg.StateDir, b.cfg.CAPEM); err != nil {
		return err
	}
	if err := os.WriteFile(b.Runtime.cfg.ResolvConf, inside.ResolvConf(b.HostAddr().String()), 0o644); err != nil {
		return err
	}
	if err := b.Ping(ctx); err != nil {
		return err
	}
	if err := b.checkRuntimes(ctx); err != nil {
		return err
	}
	if !b.cfg.KeepOnStop {
		// Containers of an earlier run go first: the network cannot be replaced while they use
		// it. A node that keeps its sandboxes adopts them instead (pool.Manager.Reconcile).
		if err := pool.DestroyAll(ctx, b.Runtime); err != nil {
			return err
		}
	}
	if err := b.EnsureNetwork(ctx); err != nil {
		return err
	}
	if err := b.fw.Apply(); err != nil {
		return fmt.Errorf("host firewall: %w", err)
	}
	return nil
}

// checkRuntimes refuses to start when a template asks for a runtime the engine lacks.
func (b *Backend) checkRuntimes(ctx context.Context) error {
	have, err := b.EngineRuntimes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range b.cfg.Templates {
		errs = append(errs, CannotRun(have, t))
	}
	return errors.Join(errs...)
}

// Teardown removes the network and the firewall rules, unless sandboxes are kept: they keep
// their network, and stay confined by the firewall while the node is down. Call it after every
// sandbox is destroyed.
func (b *Backend) Teardown(ctx context.Context) error {
	if b.cfg.KeepOnStop {
		return nil
	}
	// The firewall goes only with the network: sandboxes still on the bridge (a destroy that
	// failed) stay confined.
	if err := b.RemoveNetwork(ctx); err != nil {
		return fmt.Errorf("%w; the firewall is kept for them", err)
	}
	return b.fw.Remove()
}

// writeBundle writes what sandboxes trust (inside.Bundle) into dir, as a PEM bundle and as a
// PKCS#12 trust store for the JVM.
func writeBundle(dir string, caPEM []byte) error {
	bundle, p12, err := inside.Bundle(caPEM)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca-bundle.pem"), bundle, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ca-truststore.p12"), p12, 0o644)
}
