package gateway

import (
	"crypto/tls"
	"net"
	"syscall"
)

// quiet reports whether an idle connection has nothing to read: the upstream has neither closed
// it nor sent anything unasked (which would otherwise be read as the next request's answer).
// One non-blocking peek at the socket; a connection it cannot peek at counts as quiet.
func quiet(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = err == syscall.EAGAIN
		return true // never wait
	})
	return err == nil && ok
}
