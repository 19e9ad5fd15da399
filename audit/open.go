package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/mod/sumdb/note"
)

// openOptions say how openSegments reads a trail.
type openOptions struct {
	node     string        // the trail's node; "" learns it from the first segment
	verifier note.Verifier // checks seals and checkpoints; nil leaves their signatures unchecked
	// own is set for the node opening its own trail: every segment on disk is sealed from now on
	// (the node begins a new one), and the indexes it rebuilds are written, to be sealed. Without
	// it nothing is written, and the last segment is one a node may still be writing.
	own bool
}

// openedSegment is one segment as openSegments found it.
type openedSegment struct {
	name, path string
	size       int64
	seal       indexSeal
	sealed     bool
	trusted    *index // its sealed index, when the segment was trusted by its seal and not read
	x          *index // the index its records give, when it was read
	head       string // the hash of the last record x indexes
	why        string // why its sealed index could not be used ("" when it could)
	clean      bool   // its records check (beyond a torn last line and the trail's front)
}

// openSegments reads the summary of each segment of the trail in dir, following the chain across
// all of them as Verify does, and decides, once it has, which rebuilt indexes the node seals.
//
// A sealed segment is trusted by its seal without being read (see sealedIndex) when the chain
// before it is signed up to its last record: its seal vouches for its index and last record, and
// its head (read by readSeals) must link to the record before it and hold no problem. Every other
// segment is read whole, its records checked as Verify checks them (each on its own hash, the
// chain between them and to the segments either side, the segment's opening record and node, and
// with a verifier each checkpoint), and its index rebuilt from them:
//   - a sealed segment whose index is the one sealed, read only because the chain before it was
//     not yet signed, is answered through that index;
//   - a sealed segment whose index is not the one sealed is reported as tampered, and its rebuilt
//     index is used from memory (the file is left as it is, for audit verify to show); only when
//     the index file is gone and the records give back exactly the sealed index is it written
//     again without a word;
//   - a segment with no seal (the last one of the previous run; one sealed before index seals
//     existed; one whose seal was destroyed) whose records check, with nothing beside it or an
//     index that matches them, is sealed (its index written and returned among the seals to write,
//     for the node to seal with its first records) only when a signature after it covers its last
//     record: a checkpoint or a seal reached with no problem in the chain between, or, for the
//     segments after the last signature of the trail, its end. A segment that was rewritten with
//     its chain while the node was down, and whose seal was removed, does not link to the signed
//     records after it: it is never sealed, and every answer says so. An index beside it that does
//     not match its records is reported as tampered and left as it is;
//   - a segment whose records do not check (beyond a torn last line: a crash's mark, reported
//     and kept out of its index) is never sealed: its rebuilt index is used from memory and its
//     problems are part of every answer, at every start, until the trail is repaired.
//
// The trail's front must be seq 1 or explained by a signed retention record, as in Verify; a
// segment missing anywhere, or one that does not link to the one before, is a problem in every
// answer.
//
// What no signature on the trail covers (the records after its last checkpoint) cannot be told
// from what the node wrote: only the latest checkpoint kept off the trail (in Redis) can say the
// trail was cut and its tail rewritten.
func openSegments(dir string, names []string, opt openOptions) ([]segmentSummary, []indexSeal, error) {
	seals, heads, err := readSeals(dir, names, opt.verifier)
	if err != nil {
		return nil, nil, err
	}
	v := &verifier{rep: &Report{Node: opt.node}, opt: VerifyOptions{Verifier: opt.verifier}, hashes: map[uint64]string{}}
	segs := make([]openedSegment, len(names))
	for i, name := range names {
		o := &segs[i]
		o.name, o.path = name, filepath.Join(dir, name)
		st, err := os.Stat(o.path)
		if err != nil {
			return nil, nil, fmt.Errorf("audit: %w", err)
		}
		o.size = st.Size()
		o.seal, o.sealed = seals[name]
		if o.sealed {
			x, err := sealedIndex(o.path, o.seal, false)
			h := heads[name]
			switch {
			case err != nil:
				o.why = err.Error()
			case h.first.Seq == x.first() && v.covered():
				o.trusted = x
				v.skip(skippedOf(o.path, x, o.seal, h))
				if v.rep.Node == "" {
					v.rep.Node = o.seal.Node
				}
				continue
			}
		}
		before := len(v.rep.Problems)
		x, head, err := v.segment(o.path, name)
		if err != nil {
			return nil, nil, err
		}
		o.x, o.head, o.clean = x, head, v.cleanSince(before)
		if o.sealed && o.seal.Last == x.last() && o.seal.Head == head {
			v.sign(o.seal.Last) // its records, read, end with the one its seal signs
		}
		if !o.sealed && o.clean && x.records() > 0 {
			v.await(name)
		}
	}
	v.resolveGaps()
	v.settle(true) // after the last signature: nothing on the trail can cover it (see above)
	bad := map[string][]Problem{}
	for _, p := range v.rep.Problems {
		bad[p.Segment] = append(bad[p.Segment], p)
	}
	sums := make([]segmentSummary, 0, len(segs))
	var todo []indexSeal
	for i := range segs {
		o := &segs[i]
		if o.trusted != nil {
			g := o.trusted.summaryOf(o.name, o.size)
			g.sum, g.Bad = o.seal.Sum, append(g.Bad, bad[o.name]...)
			sums = append(sums, g)
			continue
		}
		g := o.x.summaryOf(o.name, o.size)
		g.Bad, g.mem = bad[o.name], o.x // from memory, unless the node writes and seals it below
		if o.sealed && o.why == "" {
			g.sum, g.mem = o.seal.Sum, nil // the index sealed, trusted for its seal as ever
			sums = append(sums, g)
			continue
		}
		seal, err := settleIndex(o, &g, i == len(segs)-1, v.sealable[o.name], opt)
		if err != nil {
			return nil, nil, err
		}
		if seal != nil {
			todo = append(todo, *seal)
		}
		sums = append(sums, g)
	}
	return sums, todo, nil
}

// settleIndex decides, for a segment openSegments read, which index queries use (g's sum, or
// its rebuilt index from memory) and, for the node opening its own trail, writes the index to
// seal and returns its seal (see openSegments). last is set for the trail's last segment, and
// covered when a signature after the segment covers it.
func settleIndex(o *openedSegment, g *segmentSummary, last, covered bool, opt openOptions) (*indexSeal, error) {
	switch {
	case o.sealed:
		enc := o.x.encode()
		if _, err := os.Stat(indexPath(o.path)); !errors.Is(err, os.ErrNotExist) || !o.clean || indexSum(enc) != o.seal.Sum {
			g.Bad = append(g.Bad, tamperedIndex(o.name, o.why+"; read from the index rebuilt from its records"))
			return nil, nil
		}
		// Deleted, and its records give back exactly the index sealed: nothing is lost.
		if opt.own {
			if err := writeFileAtomic(indexPath(o.path), enc); err != nil {
				return nil, err
			}
			g.sum, g.mem = o.seal.Sum, nil
		}
		return nil, nil
	case !opt.own && last:
		// A node may be writing it: an index beside it is never read.
		return nil, nil
	case !o.clean || o.x.records() == 0:
		return nil, nil
	}
	enc := o.x.encode()
	data, err := os.ReadFile(indexPath(o.path))
	present := err == nil
	if present && !bytes.Equal(data, enc) && validIndexFile(data) {
		g.Bad = append(g.Bad, tamperedIndex(o.name, "its index does not match its records (edited, swapped or left from another state of the trail), and no seal covers it; read from the index rebuilt from its records"))
		return nil, nil
	}
	if !covered {
		g.Bad = append(g.Bad, Problem{Segment: o.name, Reason: fmt.Sprintf("not sealed: the chain breaks between its last record (seq %d) and the next signature (a checkpoint, or a seal of a segment after it), so nothing signed says its records are the ones written (rewritten while the node was down?); read from the index its records give", o.x.last())})
		return nil, nil
	}
	if !opt.own {
		if present && bytes.Equal(data, enc) {
			g.sum, g.mem = indexSum(enc), nil // the very index its records give
		}
		return nil, nil
	}
	// Nothing beside it, an index of an earlier version or a damaged one, or the very index its
	// records give: the node writes it and seals it.
	if !bytes.Equal(data, enc) {
		if err := writeFileAtomic(indexPath(o.path), enc); err != nil {
			return nil, err
		}
	}
	g.sum, g.mem = indexSum(enc), nil
	return &indexSeal{Node: opt.node, Segment: o.name, Last: o.x.last(), Head: o.head, Sum: g.sum}, nil
}
