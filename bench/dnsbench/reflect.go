package main

import (
	"context"
	"encoding/binary"
	"flag"
	"net"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// runReflect answers every query under 253 bytes with the upstream's answer shape (one A record,
// TTL 1h, behind the question as asked) and no other work: no cache, no decision, no record. It
// reads and writes batches of up to 64 datagrams (recvmmsg and sendmmsg on Linux) and sends a
// batch's answers to one client with one length as one segmented datagram (UDP_SEGMENT), as the
// resolver does. Its qps is what the load generator reaches against a server that does no DNS
// work, as the bare relay is the gateway benchmark's floor.
func runReflect(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reflect", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:15359", "listen address")
	fs.Parse(args)
	c, err := net.ListenPacket("udp4", *listen)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); c.Close() }()
	pc := ipv4.NewPacketConn(c)
	const batch = 64
	in, out := make([]ipv4.Message, batch), make([]ipv4.Message, batch)
	answers := make([][]byte, batch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, 512)}
		answers[i] = make([]byte, 0, 512)
		out[i].OOB = make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&out[i].OOB[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
	}
	for {
		n, err := pc.ReadBatch(in, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		// One message per client and answer length, its answers the message's buffers.
		k := 0
		for i, m := range in[:n] {
			b := reflectAnswer(m.Buffers[0][:m.N], answers[i][:0])
			if b == nil {
				continue
			}
			answers[i] = b
			g := 0
			for g < k && !(len(out[g].Buffers[0]) == len(b) && (len(out[g].Buffers)+1)*len(b) <= 60000 &&
				sameUDPAddr(out[g].Addr, m.Addr)) {
				g++
			}
			if g == k {
				out[k].Buffers, out[k].Addr = out[k].Buffers[:0], m.Addr
				k++
			}
			out[g].Buffers = append(out[g].Buffers, b)
		}
		for g := range k {
			binary.NativeEndian.PutUint16(out[g].OOB[unix.CmsgLen(0):], uint16(len(out[g].Buffers[0])))
		}
		for sent := 0; sent < k; {
			w, err := pc.WriteBatch(out[sent:k], 0)
			if err != nil {
				sent++
				continue
			}
			sent += w
		}
	}
}

// reflectAnswer appends to out the answer to the query q: its header and question with QR, AA
// and RA set, and one A record pointing at the question's name; nil when q is no plain query.
func reflectAnswer(q, out []byte) []byte {
	if len(q) < 12 || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	i := 12
	for i < len(q) && q[i] != 0 {
		if q[i]&0xc0 != 0 {
			return nil
		}
		i += 1 + int(q[i])
	}
	i += 1 + 4
	if i > len(q) || i > 253 {
		return nil
	}
	out = append(out, q[:i]...)
	out[2] |= 0x84 // QR, AA
	out[3] = 0x80  // RA, NOERROR
	binary.BigEndian.PutUint16(out[6:], 1)
	binary.BigEndian.PutUint16(out[8:], 0)
	binary.BigEndian.PutUint16(out[10:], 0)
	return append(out, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 93, 184, 215, 14)
}

func sameUDPAddr(a, b net.Addr) bool {
	x, ok1 := a.(*net.UDPAddr)
	y, ok2 := b.(*net.UDPAddr)
	return ok1 && ok2 && x.Port == y.Port && x.IP.Equal(y.IP)
}
