package dnsfilter

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// On Linux each UDP worker reads up to batch datagrams per recvmmsg and answers them with one
// sendmmsg. The message headers, address buffers and packet buffers are allocated once per
// worker and the sender's address goes back as the raw socket address it arrived as, so a query
// costs no allocation and no address conversion on the way in or out.

// batch is how many datagrams one worker reads (recvmmsg) and answers (sendmmsg) per system
// call; under load the syscalls, not the resolving, are the cost.
const batch = 64

// mmsghdr is struct mmsghdr from <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// mmsgs is one batch of datagrams: headers, their iovecs, socket addresses and buffers.
type mmsgs struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names [][unix.SizeofSockaddrInet6]byte
	bufs  [][]byte
}

func newMmsgs(n, size int) *mmsgs {
	m := &mmsgs{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([][unix.SizeofSockaddrInet6]byte, n), bufs: make([][]byte, n)}
	for i := range n {
		m.bufs[i] = make([]byte, size)
		m.setBuf(i, m.bufs[i])
		m.hdrs[i].hdr.Name = &m.names[i][0]
		m.hdrs[i].hdr.Namelen = uint32(len(m.names[i]))
		m.hdrs[i].hdr.Iov = &m.iovs[i]
		m.hdrs[i].hdr.SetIovlen(1)
	}
	return m
}

func (m *mmsgs) setBuf(i int, b []byte) {
	m.bufs[i] = b
	m.iovs[i].Base = unsafe.SliceData(b)
	m.iovs[i].SetLen(len(b))
}

// source is the sender of datagram i.
func (m *mmsgs) source(i int) (netip.Addr, bool) {
	sa := m.names[i][:m.hdrs[i].hdr.Namelen]
	switch {
	case len(sa) >= unix.SizeofSockaddrInet4 && *(*uint16)(unsafe.Pointer(&sa[0])) == unix.AF_INET:
		return netip.AddrFrom4([4]byte(sa[4:8])), true
	case len(sa) >= unix.SizeofSockaddrInet6 && *(*uint16)(unsafe.Pointer(&sa[0])) == unix.AF_INET6:
		return netip.AddrFrom16([16]byte(sa[8:24])).Unmap(), true
	}
	return netip.Addr{}, false
}

func (m *mmsgs) recv(rc syscall.RawConn) (int, error) {
	for i := range m.hdrs {
		m.hdrs[i].hdr.Namelen = uint32(len(m.names[i]))
		m.iovs[i].SetLen(cap(m.bufs[i]))
		m.hdrs[i].hdr.Flags = 0
	}
	var n int
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(len(m.hdrs)), 0, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		n, errno = int(r), e
		return true
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return n, nil
}

// send sends the first n datagrams, going on past one the kernel refuses.
func (m *mmsgs) send(rc syscall.RawConn, n int) {
	for sent := 0; sent < n; {
		var k int
		var errno syscall.Errno
		err := rc.Write(func(fd uintptr) bool {
			r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[sent])), uintptr(n-sent), 0, 0, 0)
			if e == unix.EAGAIN || e == unix.EINTR {
				return false
			}
			k, errno = int(r), e
			return true
		})
		switch {
		case err != nil:
			return
		case errno != 0:
			sent++ // the first unsent datagram failed (say, an unreachable sender): skip it
		default:
			sent += k
		}
	}
}

func (r *Resolver) udpWorker(pc net.PacketConn) {
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		r.udpLoop(pc)
		return
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		r.udpLoop(pc)
		return
	}
	in, out := newMmsgs(batch, 4096), newMmsgs(batch, 0)
	replies := make([][]byte, batch)
	for i := range replies {
		replies[i] = make([]byte, 0, 1232)
	}
	for {
		n, err := in.recv(rc)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		k := 0
		for i := range n {
			src, ok := in.source(i)
			if !ok {
				continue
			}
			b := r.reply(in.bufs[i][:in.hdrs[i].n], src, replies[k][:0])
			if b == nil {
				continue
			}
			if cap(b) <= cap(replies[k]) {
				replies[k] = b[:0]
			}
			out.setBuf(k, b)
			out.names[k] = in.names[i]
			out.hdrs[k].hdr.Namelen = in.hdrs[i].hdr.Namelen
			k++
		}
		out.send(rc, k)
	}
}
