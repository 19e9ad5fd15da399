package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/airlock-dev/airlock/gateway/scope"
)

// Resolver looks up a name's addresses; *net.Resolver meets it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ContextDialer opens connections; *net.Dialer meets it. Tests put a recording, refusing dialer
// here so an SSRF regression fails instead of sending traffic.
type ContextDialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// dialer resolves upstream names itself (the client's idea of an address is never trusted), vets
// each address, and dials exactly the address it vetted, so no second lookup can rebind it.
type dialer struct {
	pins     func() map[string]netip.AddrPort // "host:port" -> pinned private upstream
	allow    []netip.Prefix                   // operator-allowed non-public ranges
	resolver Resolver
	net      ContextDialer
}

// vet returns the address to dial for host:port, or a Refusal.
func (d *dialer) vet(ctx context.Context, host string, port int) (netip.AddrPort, error) {
	if ap, ok := d.pins()[net.JoinHostPort(host, strconv.Itoa(port))]; ok {
		return ap, nil
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs, err = d.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("resolving %s: %w", host, err)
		}
	}
	for _, a := range addrs {
		a = a.Unmap()
		if d.allowed(a) {
			return netip.AddrPortFrom(a, uint16(port)), nil
		}
	}
	return netip.AddrPort{}, refuse(http.StatusForbidden, RulePrivateAddress,
		fmt.Sprintf("%s resolves only to non-public addresses (%v)", host, addrs),
		"an operator can pin a private upstream by name in gateway.private_upstreams")
}

func (d *dialer) allowed(a netip.Addr) bool {
	if scope.IsPublicAddr(a) {
		return true
	}
	for _, p := range d.allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// DialContext is the upstream transport's dial: address is the request's host:port.
func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("bad port in %q", address)
	}
	ap, err := d.vet(ctx, host, port)
	if err != nil {
		return nil, err
	}
	return d.net.DialContext(ctx, "tcp", ap.String())
}
