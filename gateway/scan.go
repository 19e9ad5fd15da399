package gateway

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// scan is one pass of a scrubber over a text: it finds the forms in it leftmost first, then
// longest, as a byte-by-byte scan reading every escape would, while reading few of its bytes.
//
// A form can lie in the text in two ways. As it is: the sampler (sample) finds it by probing a
// four-byte window every short-3 bytes. With an escape in it: then its first escape begins with a
// byte an escape begins with ('%', '&', '\'), found by IndexByte, and what that escape reads as
// is the form's byte at some offset k, with the k bytes before it the form's start as it is; the
// form index by byte (pos) lists the candidates, most ruled out by the byte before the escape.
// Only escapes in a long stretch are read (long): every byte of a form's text, as it is or
// escaped, is a unit byte, and there are at least as many of them as the form is long, so an
// escape among fewer unit bytes in a row (as in random, compressed bytes) holds no form. At
// the end of a final text, the last keep bytes are read unit by unit too, for the cut-off start
// of a secret's form. Not safe for concurrent use; one per text.
type scan struct {
	s     *scrubber
	b     []byte
	final bool
	// limit: events at or after it are not decided (the last keep bytes of a text that goes on).
	limit int
	lit   int // where the sampler's next form starts, len(b) for none; -1 before it is asked
	// intro is where the first '%', '&' and '\\' at or after introFrom are, len(b) for none.
	intro, introFrom [3]int
	// [runStart, runEnd) is known to lie in a long stretch; no position in [longQ, longAt) does.
	runStart, runEnd int
	longQ, longAt    int
	// Escapes before near are read unchecked, and after the next one found in a long stretch,
	// those up to unchecked bytes after it (escapeAt).
	near, unchecked int
	// empty holds the last positions at found to start nothing (several forms can name the same
	// start); a position it has forgotten is only read again.
	empty  [8]int
	nempty int
	m      matcher
}

// event is a form found (start to end, replaced by repl), or a position the text does not yet
// decide (pending: it ends while a form starting there could still be read).
type event struct {
	start, end int
	repl       []byte
	pending    bool
}

func (s *scrubber) scan(b []byte, final bool) scan {
	sc := scan{s: s, b: b, final: final, limit: len(b), lit: -1, intro: [3]int{-1, -1, -1}, introFrom: [3]int{-1, -1, -1}, longQ: -1, longAt: -2, unchecked: 4 * s.short, m: matcher{b: b}}
	if !final {
		sc.limit = max(0, len(b)-s.keep)
	}
	return sc
}

// run appends b to out with every form replaced, up to what the text decides, and returns how
// much of b that was and whether any form was found. ev and ok are what next(0, limit) gave.
func (sc *scan) run(out []byte, ev event, ok bool) ([]byte, int, bool) {
	b, last, found := sc.b, 0, false
	for ; ok; ev, ok = sc.next(last, sc.limit) {
		if ev.pending {
			sc.limit = ev.start
			break
		}
		found = true
		out = append(append(out, b[last:ev.start]...), ev.repl...)
		last = ev.end
	}
	end := len(b)
	if !sc.final {
		end = max(last, sc.limit)
	}
	return append(out, b[last:end]...), end, found
}

// next returns the leftmost event starting in [i, limit).
func (sc *scan) next(i, limit int) (event, bool) {
	b, s := sc.b, sc.s
	if sc.lit < i {
		sc.lit = len(b)
		if p, _, ok := s.sample(b, i); ok {
			sc.lit = p
		}
	}
	best, found := min(sc.lit, limit), event{}
	try := func(p int) {
		if p < i || p >= best || slices.Contains(sc.empty[:min(sc.nempty, len(sc.empty))], p) {
			return
		}
		if ev, ok := sc.at(p); ok {
			best, found = p, ev
			return
		}
		sc.empty[sc.nempty%len(sc.empty)] = p
		sc.nempty++
	}
	// A form holding an escape starts at most keep bytes before its first one.
	var as alts
	for e := sc.escapeAt(i); e < len(b) && e-s.keep < best; e = sc.escapeAt(e + 1) {
		cut := readings(b, e, &as)
		if cut && !sc.final && max(i, e-s.keep) < best {
			// The escape goes on past what is here: a form reading through it may start as far
			// back as keep bytes.
			best = max(i, e-s.keep)
			found = event{start: best, pending: true}
		}
		var seen [4]uint64
		for _, a := range as.a[:as.n] {
			if a.n == 0 {
				// A reading of nothing (a line continued): the form's bytes go on after it, and
				// the text's byte before e is one of them.
				if e-1 >= i {
					for _, prev := range [2]byte{b[e-1], ' '} {
						if prev == ' ' && b[e-1] != '+' {
							break
						}
						for _, fk := range s.pos[prev] {
							if p := e - int(fk.k) - 1; p >= i && p < best && literalPrefix(b[p:e], s.forms[fk.f].b[:fk.k+1]) {
								try(p)
							}
						}
					}
				}
				continue
			}
			v := a.val[0]
			if seen[v>>6]&(1<<(v&63)) != 0 {
				continue
			}
			seen[v>>6] |= 1 << (v & 63)
			if e-1 >= i {
				// A form whose byte at k > 0 is v: the text's byte before e is its byte at k-1.
				if prev := b[e-1]; s.pairs.has(prev, v) || prev == '+' && s.pairs.has(' ', v) {
					for _, fk := range s.pos[v] {
						if p := e - int(fk.k); fk.k > 0 && p >= i && p < best && literalPrefix(b[p:e], s.forms[fk.f].b[:fk.k]) {
							try(p)
						}
					}
				}
			}
			if len(s.first[v]) > 0 && e < best {
				try(e) // a form that starts with the escape
			}
		}
	}
	if sc.final {
		for p := max(i, len(b)-s.keep); p < best; p++ {
			try(p)
		}
	}
	if best < min(sc.lit, limit) || found.pending {
		return found, true
	}
	if sc.lit < limit {
		return sc.at(sc.lit) // the sampler's form, or a longer one there
	}
	return event{}, false
}

// introAt returns where the first byte an escape begins with is, from i on; len(b) for none.
func (sc *scan) introAt(i int) int {
	first := len(sc.b)
	for k, c := range [3]byte{'%', '&', '\\'} {
		if i < sc.introFrom[k] || sc.intro[k] < i {
			sc.intro[k], sc.introFrom[k] = len(sc.b), i
			if j := bytes.IndexByte(sc.b[i:], c); j >= 0 {
				sc.intro[k] = i + j
			}
		}
		first = min(first, sc.intro[k])
	}
	return first
}

// escapeAt returns where the first byte an escape begins with is, from j on, that may lead to a
// form: one in a long stretch, or one close behind one that was; len(b) for none.
func (sc *scan) escapeAt(j int) int {
	b, short := sc.b, sc.s.short
	for j < len(b) {
		e := sc.introAt(j)
		if e == len(b) {
			return e
		}
		if e < sc.near {
			return e
		}
		long, end := sc.long(e)
		if long {
			// Text where escapes are read (a page, JSON) has the next ones close behind, and
			// reading them costs little more than checking their stretches: read them unchecked
			// for a while, the longer the more checks found nothing to pass over.
			sc.near = e + sc.unchecked
			sc.unchecked = min(2*sc.unchecked, maxUnchecked)
			return e
		}
		sc.unchecked = 4 * short
		j = end
		if short >= probeShort {
			j = sc.longFrom(end)
		}
	}
	return len(b)
}

// maxUnchecked bounds how far escapes are read unchecked after one found in a long stretch.
const maxUnchecked = 4 << 10

// probeShort is the shortest form for which the next long stretch is probed for, rather than the
// next escape's stretch looked at: probing reads a byte every short, looking reads one or two
// around each escape, found by IndexByte.
const probeShort = 16

// long reports whether b[t], a unit byte, lies in a long stretch: unit bytes in a row, at least
// short of them or running to the end of b (where a form may be cut, or go on in the next read).
// Where it does not, end is where its stretch ends.
//
// No form can be read through an escape outside one. A form the scan reads from p, whole or up
// to the end of b, is read unit by unit (unescape.go): a byte as it is, which is the form's
// byte, or an escape, whose bytes are escape bytes or the form's bytes it reads as, at least as
// many as those (isEscapeByte; a '+' for a space is an escape byte too). So what it spans is
// unit bytes, at least len(form) >= short of them or up to the end of b; and an escape at e
// leads the scan only to starts p whose bytes up to e are the form's as they are.
func (sc *scan) long(t int) (bool, int) {
	b, unit, short := sc.b, &sc.s.unit, sc.s.short
	if sc.runStart <= t && t < sc.runEnd {
		return true, 0
	}
	start, end := t, t+1
	for start > 0 && end-start < short && unit[b[start-1]] {
		start--
	}
	for end < len(b) && end-start < short && unit[b[end]] {
		end++
	}
	if end-start >= short || end == len(b) {
		sc.runStart, sc.runEnd = start, end
		return true, 0
	}
	return false, end
}

// longFrom returns the first position at or after q that lies in a long stretch; len(b) for
// none. Every stretch of short or more bytes after q holds one of the positions probed, every
// short-th from q+short-1, so the first probe in one finds the first of them.
func (sc *scan) longFrom(q int) int {
	b, unit, short := sc.b, &sc.s.unit, sc.s.short
	if sc.longQ <= q && q <= sc.longAt {
		return sc.longAt
	}
	at := len(b)
	switch {
	case q >= len(b):
	case unit[b[q]] && func() bool { long, _ := sc.long(q); return long }():
		at = q
	default:
		for t := q + short - 1; t < len(b); t += short {
			if !unit[b[t]] {
				continue
			}
			if long, _ := sc.long(t); long {
				// Where that stretch starts: after the probe before t, which was in no long one.
				at = t
				for at > q && unit[b[at-1]] {
					at--
				}
				break
			}
		}
		if at == len(b) && unit[b[len(b)-1]] {
			// A stretch running to the end, too short to hold a probe.
			at = len(b) - 1
			for at > q && unit[b[at-1]] {
				at--
			}
		}
	}
	sc.longQ, sc.longAt = q, at
	return at
}

// literalPrefix reports whether t, text as it is, is f: byte for byte, or '+' for a space.
func literalPrefix(t, f []byte) bool {
	for j := len(t) - 1; j >= 0; j-- {
		if t[j] != f[j] && !(t[j] == '+' && f[j] == ' ') {
			return false
		}
	}
	return true
}

// at reads every form that could start at p, unit by unit, and returns the event there: the
// longest form found whole; at the end of a final text, the cut-off start of a secret's form
// (which then runs to the end); or, when the text ends while a longer form is still being read
// and it is not final, pending.
func (sc *scan) at(p int) (event, bool) {
	b, s := sc.b, sc.s
	c := b[p]
	// The bytes a form starting here could start with: c itself, and what an escape here reads as.
	var firsts [maxAlts + 1]byte
	n, short := 1, false
	firsts[0] = c
	if c == '+' || isIntroducer(c) {
		var as alts
		short = readings(b, p, &as)
		for _, a := range as.a[:as.n] {
			if a.n > 0 && bytes.IndexByte(firsts[:n], a.val[0]) < 0 {
				firsts[n] = a.val[0]
				n++
			}
		}
	} else if len(s.first[c]) == 0 {
		return event{}, false
	}
	var best *form
	bestEnd, cut := 0, false
	// open: a form the text ended inside while it was being read, and how long it is; openWhole:
	// one found whole though a reading of it was cut by the end (it may end further on).
	open, openWhole := 0, false
	for _, v := range firsts[:n] {
		for i := range s.first[v] {
			f := &s.first[v][i]
			end, ok, ran := sc.m.read(p, f.b)
			switch {
			case ok:
				if best == nil || len(f.b) > len(best.b) {
					best, bestEnd = f, end
				}
				openWhole = openWhole || ran >= 0
			case ran >= 0 && !sc.final:
				open = max(open, len(f.b))
			case f.cut > 0 && ran >= f.cut:
				cut = true
			}
		}
	}
	switch {
	case !sc.final && (short || openWhole || best == nil && open > 0 || best != nil && open > len(best.b)):
		return event{start: p, pending: true}, true
	case cut:
		return event{start: p, end: len(b), repl: redactedBytes}, true
	case best != nil:
		return event{start: p, end: bestEnd, repl: best.repl}, true
	}
	return event{}, false
}

var redactedBytes = []byte(redacted)

// pairSet is a set of byte pairs: which byte follows which in some form.
type pairSet [256 * 256 / 64]uint64

func (ps *pairSet) add(a, b byte) { i := int(a)<<8 | int(b); ps[i>>6] |= 1 << (i & 63) }

func (ps *pairSet) has(a, b byte) bool { i := int(a)<<8 | int(b); return ps[i>>6]&(1<<(i&63)) != 0 }

// matcher reads forms from one text unit by unit: each byte of a form as it is, or in any escape
// that reads as it (unescape.go).
type matcher struct {
	b []byte
	// tried remembers what reading the rest of a form from a text offset gave, where two
	// readings of one escape both fitted, so a text built to be ambiguous costs one try of each.
	tried map[[2]int]result
}

// result is what reading (the rest of) a form gave: where it ends when all of it is there (ok);
// otherwise how much of the form was read when the text ended inside it (ran), or -1 when the
// text did not end inside it.
type result struct {
	end, ran int
	ok       bool
}

// read reads f from the text at p. Where two readings fit (a '%' as it is, or "%25"), the one
// that ends furthest in the text wins, so that all of what could stand for the form is replaced.
func (m *matcher) read(p int, f []byte) (end int, ok bool, ran int) {
	clear(m.tried)
	r := m.from(p, f, 0)
	return r.end, r.ok, r.ran
}

func (m *matcher) from(j int, f []byte, k int) result {
	ran := -1
	var as alts
	for k < len(f) {
		if j == len(m.b) {
			return result{ran: max(ran, k)}
		}
		c := m.b[j]
		if c != '+' && !isIntroducer(c) {
			if c != f[k] {
				return result{ran: ran}
			}
			j, k = j+1, k+1
			continue
		}
		if readings(m.b, j, &as) {
			ran = max(ran, k) // the text ends inside an escape that may go on to f[k]
		}
		fit := as.a[:0]
		for _, a := range as.a[:as.n] {
			if int(a.n) <= len(f)-k && string(a.val[:a.n]) == string(f[k:k+int(a.n)]) {
				fit = append(fit, a)
			}
		}
		switch len(fit) {
		case 0:
			return result{ran: ran}
		case 1:
			j, k = j+fit[0].took, k+int(fit[0].n)
			continue
		}
		best := result{ran: ran}
		for _, a := range fit {
			at := [2]int{j + a.took, k + int(a.n)}
			r, seen := m.tried[at]
			if !seen {
				r = m.from(at[0], f, at[1])
				if m.tried == nil {
					m.tried = map[[2]int]result{}
				}
				m.tried[at] = r
			}
			best.ran = max(best.ran, r.ran)
			if r.ok && (!best.ok || r.end > best.end) {
				best.end, best.ok = r.end, true
			}
		}
		return best
	}
	return result{end: j, ok: true, ran: ran}
}

// sample finds the leftmost form as it is starting at i or after in b (the longest there),
// probing every short-3 positions: a form starting at p covers the probe in [p, p+short-4]
// with one of its windows, so the first probe some form covers holds the leftmost form's start.
func (s *scrubber) sample(b []byte, i int) (int, form, bool) {
	if len(s.forms) == 0 {
		return 0, form{}, false
	}
	span := s.short - minForm // how far before a probe a form covering it can start
	for j := i + span; j+minForm <= len(b); j += span + 1 {
		k := binary.LittleEndian.Uint32(b[j:])
		h := filterHash(k)
		if s.windows[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		start := -1
		for _, w := range s.at[k] {
			p := j - w.o
			if p >= i && (start < 0 || p < start) && bytes.HasPrefix(b[p:], w.f.b) {
				start = p
			}
		}
		if start >= 0 {
			f, _ := s.match(b[start:], binary.LittleEndian.Uint32(b[start:]))
			return start, f, true
		}
	}
	return 0, form{}, false
}

// match returns the longest form at the start of b, whose first four bytes are k, if any.
func (s *scrubber) match(b []byte, k uint32) (form, bool) {
	for _, f := range s.buckets[k] {
		if bytes.HasPrefix(b, f.b) {
			return f, true
		}
	}
	return form{}, false
}
