package dnsfilter

import (
	"encoding/binary"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
)

// The fast path. Most of what sandboxes ask is a plain query for a name already in the cache; for
// those the resolver reads the question straight from the packet and writes the cached answer,
// packed once when it was stored, straight into the reply, instead of unpacking, copying and
// packing a dns.Msg per query. Every query still passes admit and is recorded as on the general
// path; anything the fast path does not handle (an unusual header, a name with other than letters,
// digits, '-' and '_', a refusal, a pin, a miss, an answer too big for the client) goes the
// general way, after admit, so no query is admitted twice.

// wireQuery is a plain query as read from the packet by parseQuery.
type wireQuery struct {
	id       uint16
	rd, cd   bool
	name     string // as sent, with the trailing dot
	qtype    uint16
	question []byte // the question section as sent (the client's 0x20 spelling)
	edns     bool
	udpSize  uint16
	do       bool
}

// parseQuery reads p when it is a plain standard query: header with QR clear and opcode QUERY,
// one IN-class question whose name is uncompressed letters, digits, '-' and '_', no answer or
// authority records, at most one additional record which is a version-0 OPT with well-formed
// options, and nothing after it. ok is false for anything else.
func parseQuery(p []byte) (q wireQuery, ok bool) {
	if len(p) < 12+1+4 {
		return q, false
	}
	flags := binary.BigEndian.Uint16(p[2:])
	if flags&0x8000 != 0 || (flags>>11)&0xf != dns.OpcodeQuery {
		return q, false
	}
	if binary.BigEndian.Uint16(p[4:]) != 1 || binary.BigEndian.Uint16(p[6:]) != 0 || binary.BigEndian.Uint16(p[8:]) != 0 {
		return q, false
	}
	ar := binary.BigEndian.Uint16(p[10:])
	if ar > 1 {
		return q, false
	}
	var name [256]byte
	n, i := 0, 12
	for {
		if i >= len(p) {
			return q, false
		}
		l := int(p[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(p) || n+l+1 > 254 {
			return q, false
		}
		for _, c := range p[i : i+l] {
			if !ldhByte(c) {
				return q, false
			}
		}
		n += copy(name[n:], p[i:i+l])
		name[n] = '.'
		n++
		i += l
	}
	if n == 0 || i+4 > len(p) {
		return q, false // the root, or a truncated question
	}
	q.qtype = binary.BigEndian.Uint16(p[i:])
	if binary.BigEndian.Uint16(p[i+2:]) != dns.ClassINET {
		return q, false
	}
	i += 4
	q.question = p[12:i]
	if ar == 1 {
		// OPT: root owner, type 41, class = UDP size, TTL = extended rcode, version, flags.
		if i+11 > len(p) || p[i] != 0 || binary.BigEndian.Uint16(p[i+1:]) != dns.TypeOPT || p[i+5] != 0 || p[i+6] != 0 {
			return q, false
		}
		q.edns, q.udpSize, q.do = true, binary.BigEndian.Uint16(p[i+3:]), p[i+7]&0x80 != 0
		rdlen := int(binary.BigEndian.Uint16(p[i+9:]))
		i += 11
		if i+rdlen != len(p) {
			return q, false
		}
		for j := i; j < i+rdlen; {
			if j+4 > i+rdlen {
				return q, false
			}
			j += 4 + int(binary.BigEndian.Uint16(p[j+2:]))
			if j > i+rdlen {
				return q, false
			}
		}
		i += rdlen
	}
	if i != len(p) {
		return q, false
	}
	q.id = binary.BigEndian.Uint16(p)
	q.rd, q.cd = flags&0x0100 != 0, flags&0x0010 != 0
	q.name = string(name[:n])
	return q, true
}

func ldhByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// msg is q as a dns.Msg, for the general path.
func (q *wireQuery) msg() *dns.Msg {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: q.id, Opcode: dns.OpcodeQuery, RecursionDesired: q.rd, CheckingDisabled: q.cd},
		Question: []dns.Question{{Name: q.name, Qtype: q.qtype, Qclass: dns.ClassINET}}}
	if q.edns {
		m.SetEdns0(q.udpSize, q.do)
	}
	return m
}

// limit is the largest UDP answer the client takes, as finish fits the general path's answers.
func (q *wireQuery) limit() int {
	if !q.edns {
		return dns.MinMsgSize
	}
	return min(max(int(q.udpSize), dns.MinMsgSize), 1232)
}

// wireAnswer is a cached answer packed once: the sections after the question, packed behind a
// question of the lower-case name. Compression pointers into that question stay right behind any
// spelling of the same name, which has the same length and labels.
type wireAnswer struct {
	flags   uint16    // header flags as the general path would send them
	counts  [3]uint16 // answer, authority, additional
	body    []byte
	ttls    []int // offsets of each record's TTL in body
	answers int
	private bool // some address in the answer is not public: the general path refuses it
}

// packWire packs m (with the canonical question k) for the fast path; it returns nil when m does
// not pack or holds records the fast path does not rewrite (OPT).
func packWire(k cacheKey, m *dns.Msg) *wireAnswer {
	c := *m // packing reads the records; only the question and compression differ
	c.Question = []dns.Question{{Name: k.name, Qtype: k.qtype, Qclass: k.qclass}}
	c.Compress = true
	p, err := c.Pack()
	if err != nil {
		return nil
	}
	i := 12
	for i < len(p) && p[i] != 0 {
		i += 1 + int(p[i])
	}
	i += 1 + 4
	if i > len(p) {
		return nil
	}
	w := &wireAnswer{flags: binary.BigEndian.Uint16(p[2:]), body: p[i:], answers: len(m.Answer)}
	for s := range w.counts {
		w.counts[s] = binary.BigEndian.Uint16(p[6+2*s:])
	}
	_, w.private = firstPrivate(m)
	b := w.body
	for j, n := 0, int(w.counts[0])+int(w.counts[1])+int(w.counts[2]); n > 0; n-- {
		for j < len(b) && b[j] != 0 && b[j]&0xc0 != 0xc0 {
			j += 1 + int(b[j])
		}
		switch {
		case j >= len(b):
			return nil
		case b[j] == 0:
			j++
		default:
			j += 2
		}
		if j+10 > len(b) || binary.BigEndian.Uint16(b[j:]) == dns.TypeOPT {
			return nil
		}
		w.ttls = append(w.ttls, j+4)
		j += 10 + int(binary.BigEndian.Uint16(b[j+8:]))
		if j > len(b) {
			return nil
		}
	}
	return w
}

// appendReply appends the reply to q from w, with TTLs lowered by age; ok is false when it would
// not fit the client's UDP size (the general path truncates it).
func (w *wireAnswer) appendReply(out []byte, q *wireQuery, age uint32) ([]byte, bool) {
	opt := 0
	if q.edns {
		opt = 11
	}
	if 12+len(q.question)+len(w.body)+opt > q.limit() {
		return out, false
	}
	flags := w.flags &^ 0x0200 // never TC: it fits
	ar := w.counts[2]
	if q.edns {
		ar++
	}
	out = binary.BigEndian.AppendUint16(out, q.id)
	out = binary.BigEndian.AppendUint16(out, flags)
	out = binary.BigEndian.AppendUint16(out, 1)
	out = binary.BigEndian.AppendUint16(out, w.counts[0])
	out = binary.BigEndian.AppendUint16(out, w.counts[1])
	out = binary.BigEndian.AppendUint16(out, ar)
	out = append(out, q.question...)
	base := len(out)
	out = append(out, w.body...)
	for _, off := range w.ttls {
		t := binary.BigEndian.Uint32(out[base+off:])
		binary.BigEndian.PutUint32(out[base+off:], t-min(t, age))
	}
	if q.edns {
		var do byte
		if q.do {
			do = 0x80
		}
		out = append(out, 0, 0, byte(dns.TypeOPT), 1232>>8, 1232&0xff, 0, 0, do, 0, 0, 0)
	}
	return out, true
}

// handleWire answers pkt from src into out when parseQuery takes it. handled is false when the
// packet must go the general way (nothing has been decided or recorded then); a handled packet
// with a nil reply has nothing to send.
func (r *Resolver) handleWire(pkt []byte, src netip.Addr, out []byte) (reply []byte, handled bool) {
	q, ok := parseQuery(pkt)
	if !ok {
		return nil, false
	}
	start := r.now()
	rec := r.newRecord(start, src)
	name, d := r.admit(src, q.name, q.qtype, &rec, start)
	if d.rule == "" {
		if _, pinned := r.pinned(name); !pinned {
			k := cacheKey{name: lowerASCII(q.name), qtype: q.qtype, qclass: dns.ClassINET}
			if w, age, hit := r.cache.getWire(k, start); hit && !w.private {
				if b, fits := w.appendReply(out, &q, age); fits {
					r.metrics.cacheHit(true)
					rec.Decision, rec.Rule, rec.Reason, rec.Answers = audit.Allow, rule.Scope, "cached", w.answers
					if r.record(&rec, q.qtype, start) {
						return b, true
					}
					req := q.msg()
					resp := r.unrecorded(req)
					r.finish(req, resp, true)
					return pack(resp, out), true
				}
			}
		}
	}
	req := q.msg()
	return pack(r.seal(req, r.respond(req, name, d, &rec), true, start, &rec), out), true
}

func pack(m *dns.Msg, out []byte) []byte {
	b, err := m.PackBuffer(out)
	if err != nil {
		return nil
	}
	return b
}

// lowerASCII is strings.ToLower for the fast path's names, without a copy when there is nothing
// to lower.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
