package gateway

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"
)

// soOriginalDst is SO_ORIGINAL_DST from linux/netfilter_ipv4.h: the destination a connection
// had before netfilter's NAT (here, the redirect of a sandbox's port 80 and 443) changed it.
const soOriginalDst = 80

// OriginalDst reports where c, accepted from a redirect, was headed (IPv4: sandboxes have no
// IPv6).
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa [16]byte // struct sockaddr_in
	var errno syscall.Errno
	err = raw.Control(func(fd uintptr) {
		size := uint32(len(sa))
		_, _, errno = syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.SOL_IP, soOriginalDst,
			uintptr(unsafe.Pointer(&sa[0])), uintptr(unsafe.Pointer(&size)), 0)
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	if errno != 0 {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", errno)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), binary.BigEndian.Uint16(sa[2:4])), nil
}
