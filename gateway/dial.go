package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
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

// The standard library's implementations, which New defaults to.
var (
	_ Resolver      = (*net.Resolver)(nil)
	_ ContextDialer = (*net.Dialer)(nil)
)

// dialer resolves upstream names itself (the client's idea of an address is never trusted), vets
// each address, and dials exactly the address it vetted, so no second lookup can rebind it.
//
// With a ttl, what a name resolved to is kept that long: the request path resolves (and records
// the lookup) before anything is sent, and the transport's dial a moment later finds the same
// vetted addresses instead of asking again.
type dialer struct {
	pins     func() map[string]netip.AddrPort // "host:port" -> pinned private upstream
	allow    []netip.Prefix                   // operator-allowed non-public ranges
	resolver Resolver
	net      ContextDialer
	ttl      time.Duration // zero: every vet looks the name up

	mu    sync.Mutex
	cache map[string]resolved
}

type resolved struct {
	addrs   []netip.Addr
	expires time.Time
}

// lookupTTL is how long the gateway keeps what a name resolved to.
const lookupTTL = 30 * time.Second

// maxResolved bounds the names kept.
const maxResolved = 10000

// lookup is one name lookup the dialer made, for the audit trail.
type lookup struct {
	host  string
	addrs []netip.Addr
	err   error
	took  time.Duration
}

// vet returns the address to dial for host:port, or a Refusal. A lookup it makes (not a pin, an
// address literal or a kept answer) is passed to onLookup first, when that is set; an error from
// onLookup (the lookup could not be recorded) refuses the destination.
func (d *dialer) vet(ctx context.Context, host string, port int, onLookup func(lookup) error) (netip.AddrPort, error) {
	if ap, ok := d.pins()[hostPort(host, port)]; ok {
		return ap, nil
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs = d.kept(host); addrs == nil {
		start := time.Now()
		addrs, err = d.resolver.LookupNetIP(ctx, "ip", host)
		if onLookup != nil {
			if rerr := onLookup(lookup{host: host, addrs: addrs, err: err, took: time.Since(start)}); rerr != nil {
				return netip.AddrPort{}, rerr
			}
		}
		if err != nil {
			return netip.AddrPort{}, lookupFailed(host, err)
		}
		d.keep(host, addrs)
	}
	for _, a := range addrs {
		a = a.Unmap()
		if d.allowed(a) {
			return netip.AddrPortFrom(a, uint16(port)), nil
		}
	}
	ref := refuse(http.StatusForbidden, rule.PrivateAddress, fmt.Sprintf("%s resolves only to non-public addresses", host),
		"an operator can pin a private upstream by name in gateway.private_upstreams")
	ref.Detail = fmt.Sprint(addrs) // the record's; the sandbox's resolver would not have said them either
	return netip.AddrPort{}, ref
}

// lookupFailed is the refusal of a name that did not resolve. The sandbox is told the name and
// why, in the resolver's own words; the record keeps the whole error, which names the server
// the gateway asked (Go's resolver puts it in every error).
func lookupFailed(host string, err error) *Refusal {
	why := "the lookup failed"
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		why = "no such host"
	case errors.As(err, &dnsErr) && dnsErr.IsTimeout:
		why = "the lookup timed out"
	case errors.As(err, &dnsErr):
		why = dnsErr.Err
	}
	return &Refusal{Status: http.StatusBadGateway, Rule: rule.UpstreamFailed, Reason: fmt.Sprintf("resolving %s: %s", host, why),
		Detail: err.Error(), Err: err}
}

func (d *dialer) kept(host string) []netip.Addr {
	if d.ttl <= 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.cache[host]
	if !ok || time.Now().After(r.expires) {
		return nil
	}
	return r.addrs
}

func (d *dialer) keep(host string, addrs []netip.Addr) {
	if d.ttl <= 0 || len(addrs) == 0 {
		return
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cache == nil {
		d.cache = map[string]resolved{}
	}
	if len(d.cache) >= maxResolved {
		for h, r := range d.cache {
			if now.After(r.expires) {
				delete(d.cache, h)
			}
		}
		if len(d.cache) >= maxResolved {
			clear(d.cache)
		}
	}
	d.cache[host] = resolved{addrs: addrs, expires: now.Add(d.ttl)}
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

// DialContext is the upstream transport's dial: address is the request's host:port, which the
// request path has already vetted (and whose lookup it recorded).
func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("bad port in %q", address)
	}
	ap, err := d.vet(ctx, host, port, nil)
	if err != nil {
		return nil, err
	}
	return d.net.DialContext(ctx, "tcp", ap.String())
}
