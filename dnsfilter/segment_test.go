//go:build linux

package dnsfilter

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The segmenter sends a batch's replies to one client of one length as one segmented datagram:
// the client must still receive each reply as a datagram of its own, byte for byte, and replies
// to other clients or of other lengths must go as before.
func TestSegmenterDeliversEachReply(t *testing.T) {
	srv, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var clients [2]net.PacketConn
	for i := range clients {
		if clients[i], err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		defer clients[i].Close()
	}
	rc, err := srv.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// 30 replies: 20 of 40 bytes to client 0, 5 of 41 bytes to client 0, 5 of 40 bytes to client 1.
	out := newMmsgs(batch, 0)
	want := [2]map[string]bool{{}, {}}
	for i := range 30 {
		c, size := 0, 40
		switch {
		case i >= 25:
			c = 1
		case i >= 20:
			size = 41
		}
		b := []byte(fmt.Sprintf("%-*d", size, i))
		want[c][string(b)] = true
		out.setBuf(i, b)
		sa := clients[c].LocalAddr().(*net.UDPAddr)
		out.names[i] = [28]byte{}
		binary.NativeEndian.PutUint16(out.names[i][:], unix.AF_INET)
		out.names[i][2], out.names[i][3] = byte(sa.Port>>8), byte(sa.Port)
		copy(out.names[i][4:8], sa.IP.To4())
		out.hdrs[i].hdr.Namelen = 16
	}
	if !segmentationWorks(rc) {
		t.Fatal("the kernel does not know UDP_SEGMENT (Linux 4.18 and later do)")
	}
	seg := newSegmenter()
	seg.send(rc, out, 30)
	if seg.off {
		t.Fatal("the kernel refused a segmented send on loopback")
	}
	if len(seg.groups) != 3 || seg.groups[0].n != 20 || seg.groups[1].n != 5 || seg.groups[2].n != 5 {
		t.Fatalf("groups %+v, want 20, 5 and 5 replies", seg.groups)
	}
	receiveAll(t, clients, want)
	// Where the kernel refuses a group, its replies go again one datagram each.
	for i := range 30 {
		want[min(i/25, 1)][string(out.bufs[i])] = true
	}
	seg.resend(rc, out, 0, len(seg.groups), make([]bool, 30))
	receiveAll(t, clients, want)
}

// receiveAll reads from each client until it has had each of its wanted datagrams once.
func receiveAll(t *testing.T, clients [2]net.PacketConn, want [2]map[string]bool) {
	t.Helper()
	for c, pc := range clients {
		buf := make([]byte, 2048)
		for len(want[c]) > 0 {
			pc.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				t.Fatalf("client %d: %v, still waiting for %d replies", c, err, len(want[c]))
			}
			if !want[c][string(buf[:n])] {
				t.Fatalf("client %d got %q, not one of its replies (or twice)", c, buf[:n])
			}
			delete(want[c], string(buf[:n]))
		}
	}
}

// Through the whole resolver: one client's burst of queries, cached and not, allowed, refused
// and malformed, is answered query by query with the right answer for each id.
func TestBurstFromOneClient(t *testing.T) {
	h := newFullHarness(t, nil)
	names := []string{"exact.example.", "x.other.example."}
	for i := range 20 {
		names = append(names, fmt.Sprintf("n%d.files.example.", i))
	}
	for _, n := range names[2:] {
		h.ask(t, n, dns.TypeA, false, "udp") // cached
	}
	c, err := net.Dial("udp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	asked := map[uint16]string{}
	for id := uint16(1); id <= 60; id++ {
		m := new(dns.Msg)
		m.SetQuestion(names[int(id)%len(names)], dns.TypeA)
		m.Id = id
		p, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if id%15 == 0 {
			p = p[:14] // a header and a cut question: malformed, answered FORMERR
		}
		asked[id] = m.Question[0].Name
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 2048)
	for len(asked) > 0 {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("%v; %d queries unanswered: %v", err, len(asked), asked)
		}
		m := new(dns.Msg)
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		name, ok := asked[m.Id]
		if !ok {
			t.Fatalf("reply to id %d, asked no more or answered twice", m.Id)
		}
		delete(asked, m.Id)
		want := dns.RcodeSuccess
		switch {
		case m.Id%15 == 0:
			want = dns.RcodeFormatError
		case name == "x.other.example.":
			want = dns.RcodeRefused
		}
		if m.Rcode != want {
			t.Fatalf("id %d (%s): rcode %s, want %s", m.Id, name, dns.RcodeToString[m.Rcode], dns.RcodeToString[want])
		}
		if want == dns.RcodeSuccess && (len(m.Question) != 1 || m.Question[0].Name != name || len(m.Answer) != 1) {
			t.Fatalf("id %d: asked %s, got %v", m.Id, name, m)
		}
	}
}
