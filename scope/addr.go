package scope

import (
	"net/netip"
)

// nonPublic lists the ranges never reachable from a sandbox unless the operator pins a name to
// one address: loopback, private, link-local (cloud metadata at 169.254.169.254 included), CGNAT,
// multicast, documentation, benchmarking, reserved and their IPv6 counterparts.
var nonPublic = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "fc00::/7",
	"fe80::/10", "fec0::/10", "ff00::/8",
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// IsPublicAddr reports whether a is a public unicast address. IPv4 addresses embedded in
// IPv4-mapped, NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms are judged by the address
// they carry, so a private target cannot hide inside an IPv6 literal. An address with a zone
// (fe80::1%eth0, ::1%lo) is never public: a zone ties it to one of this host's links, and a
// prefix never contains a zoned address, so judging it by the ranges alone would call it public.
func IsPublicAddr(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case netip.MustParsePrefix("64:ff9b::/96").Contains(a):
			return IsPublicAddr(netip.AddrFrom4([4]byte(b[12:16])))
		case netip.MustParsePrefix("2002::/16").Contains(a):
			return IsPublicAddr(netip.AddrFrom4([4]byte(b[2:6])))
		case netip.MustParsePrefix("::/96").Contains(a):
			// IPv4-compatible (deprecated) addresses.
			return false
		}
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// IsPublicPrefix reports whether every address in p is public.
func IsPublicPrefix(p netip.Prefix) bool {
	if !IsPublicAddr(p.Addr()) {
		return false
	}
	for _, n := range nonPublic {
		if n.Overlaps(p) {
			return false
		}
	}
	return true
}
