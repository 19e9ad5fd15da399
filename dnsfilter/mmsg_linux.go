package dnsfilter

import (
	"encoding/binary"
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
	seg := newSegmenter()
	seg.off = !segmentationWorks(rc)
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
		seg.send(rc, out, k)
	}
}

// A segmenter sends the replies of one batch that go to the same client with the same length as
// one segmented datagram (UDP_SEGMENT, Linux 4.18): the kernel routes, filters and delivers them
// as one packet and splits it into the separate datagrams at the receiving socket, so what the
// resolver pays per reply on the way out (three quarters of its core under load, most of it the
// loopback or bridge delivery to the client) is paid once per group. The client receives the same
// datagrams either way. Where the kernel or the route refuses segmentation, the group goes out one
// datagram at a time and the worker stops segmenting.
type segmenter struct {
	hdrs   []mmsghdr
	iovs   []unix.Iovec
	cmsgs  [][]byte // a UDP_SEGMENT control message per group
	groups []segGroup
	member []int // reply indexes, grouped: group g is member[g.from:g.from+g.n]
	off    bool  // the kernel refused a segmented send: one datagram each from now on
}

type segGroup struct {
	first, n, from int // first reply, how many, where its members start in member
	size           int // every member's length
}

// maxSegGroups bounds the groups one batch is sorted into (a batch from more distinct clients
// and lengths sends the rest one datagram each); maxSegBytes bounds a group's payload below the
// 64 KiB an IP packet carries.
const (
	maxSegGroups = 16
	maxSegBytes  = 60000
)

func newSegmenter() *segmenter {
	g := &segmenter{hdrs: make([]mmsghdr, batch), iovs: make([]unix.Iovec, batch), cmsgs: make([][]byte, batch),
		member: make([]int, 0, batch)}
	for i := range g.cmsgs {
		b := make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		g.cmsgs[i] = b
	}
	return g
}

// send sends the first n replies of out, segmenting those that share a client and a length.
func (g *segmenter) send(rc syscall.RawConn, out *mmsgs, n int) {
	if g.off || n < 2 {
		out.send(rc, n)
		return
	}
	// Group by client and length; a reply matching no open group opens one, or, past
	// maxSegGroups, goes alone.
	g.groups = g.groups[:0]
	var alone [batch]bool
	var groupOf [batch]int
	for i := range n {
		size := int(out.iovs[i].Len)
		gi := -1
		for j := range g.groups {
			gr := &g.groups[j]
			if gr.size == size && (gr.n+1)*size <= maxSegBytes && sameAddr(out, gr.first, i) {
				gi = j
				break
			}
		}
		switch {
		case gi >= 0:
			g.groups[gi].n++
		case len(g.groups) < maxSegGroups:
			gi = len(g.groups)
			g.groups = append(g.groups, segGroup{first: i, n: 1, size: size})
		default:
			alone[i] = true
			continue
		}
		groupOf[i] = gi
	}
	// Lay each group's members out in turn, then one message per group (with the segment size
	// when it has more than one) and one per reply that went alone.
	from := 0
	for j := range g.groups {
		g.groups[j].from = from
		from += g.groups[j].n
		g.groups[j].n = 0
	}
	g.member = g.member[:from]
	for i := range n {
		if !alone[i] {
			gr := &g.groups[groupOf[i]]
			g.member[gr.from+gr.n] = i
			gr.n++
		}
	}
	m := 0
	for j, gr := range g.groups {
		for k, i := range g.member[gr.from : gr.from+gr.n] {
			g.iovs[gr.from+k] = out.iovs[i]
		}
		h := &g.hdrs[m].hdr
		*h = unix.Msghdr{Name: out.hdrs[gr.first].hdr.Name, Namelen: out.hdrs[gr.first].hdr.Namelen, Iov: &g.iovs[gr.from]}
		h.SetIovlen(gr.n)
		if gr.n > 1 {
			binary.NativeEndian.PutUint16(g.cmsgs[j][unix.CmsgLen(0):], uint16(gr.size))
			h.Control = &g.cmsgs[j][0]
			h.SetControllen(len(g.cmsgs[j]))
		}
		m++
	}
	nGrouped := m
	for i := range n {
		if alone[i] {
			g.hdrs[m].hdr = out.hdrs[i].hdr
			m++
		}
	}
	for sent := 0; sent < m; {
		k, errno, err := sendmmsg(rc, g.hdrs[sent:m])
		switch {
		case err != nil:
			return
		case errno != 0:
			// The first unsent message failed. A group the kernel would not segment goes
			// out one datagram at a time, and so does everything after it; any other
			// failure (say, an unreachable client) skips that message, as out.send does.
			if sent < nGrouped && g.groups[sent].n > 1 && (errno == unix.EIO || errno == unix.EINVAL || errno == unix.ENOPROTOOPT) {
				g.off = true
				g.resend(rc, out, sent, nGrouped, alone[:n])
				return
			}
			sent++
		default:
			sent += k
		}
	}
}

// resend sends, one datagram each, the replies of groups from on and those that went alone.
func (g *segmenter) resend(rc syscall.RawConn, out *mmsgs, from, groups int, alone []bool) {
	k := 0
	for _, gr := range g.groups[from:groups] {
		for _, i := range g.member[gr.from : gr.from+gr.n] {
			g.hdrs[k].hdr = out.hdrs[i].hdr
			k++
		}
	}
	for i, a := range alone {
		if a {
			g.hdrs[k].hdr = out.hdrs[i].hdr
			k++
		}
	}
	for sent := 0; sent < k; {
		n, errno, err := sendmmsg(rc, g.hdrs[sent:k])
		switch {
		case err != nil:
			return
		case errno != 0:
			sent++
		default:
			sent += n
		}
	}
}

// segmentationWorks reports whether the kernel knows UDP_SEGMENT. One that does not ignores the
// control message, and would send a group's replies as one datagram.
func segmentationWorks(rc syscall.RawConn) bool {
	ok := false
	rc.Control(func(fd uintptr) {
		_, err := unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
		ok = err == nil
	})
	return ok
}

// sameAddr reports whether replies i and j of out go to the same socket address.
func sameAddr(out *mmsgs, i, j int) bool {
	li, lj := out.hdrs[i].hdr.Namelen, out.hdrs[j].hdr.Namelen
	return li == lj && string(out.names[i][:li]) == string(out.names[j][:lj])
}

// sendmmsg sends hdrs with one system call, waiting while the socket is full.
func sendmmsg(rc syscall.RawConn, hdrs []mmsghdr) (int, syscall.Errno, error) {
	var k int
	var errno syscall.Errno
	err := rc.Write(func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		k, errno = int(r), e
		return true
	})
	return k, errno, err
}
