//go:build !linux

package gateway

import (
	"errors"
	"net"
	"net/netip"
)

// OriginalDst needs Linux's netfilter; elsewhere no connection is redirected to the gateway.
func OriginalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("original destination: only on Linux")
}
