package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// A segment's index is a file beside it that anyone who can write the trail can write too, and
// its checksum is unkeyed. So nothing trusts an index file for what it says: a reader trusts it
// only when it is the index the node sealed.
//
// Sealing: when a segment is sealed (at segment_bytes or segment_age, or at the node's next start
// for the segment it was writing when it stopped), the node writes its index and then, as the
// records that follow the next segment's opening record, an index seal (KindAudit, EventIndex):
// the sealed segment's name (Segment), the SHA-256 of its index (SHA256: the checksum the index
// file ends with), and the seq and hash of the segment's last record (Through, Head). The seal is
// a record of the chain, so every checkpoint after it covers it; with a key, its Note is also the
// node's signed note over the same fields:
//
//	airlock audit index
//	node <node>
//	segment <name>
//	last <seq>
//	head <hash of record seq>
//	index <SHA-256 of the index>
//
// so a reader holding the public key checks one segment's index without reading the chain
// between the seal and a checkpoint.
//
// Reading: a sealed segment's index is used only when the file ends with the sealed hash (which
// decodeIndex checks is the hash of the rest) and the segment's last record is the one sealed.
// Anything else (an index edited, swapped with another segment's, truncated, deleted, an old one
// kept, or a segment rewritten under its index) is tampering: the reader says so and reads the
// index rebuilt from the segment's records instead. The segment being written has no seal and its
// index is never read from a file. Segments sealed before index seals existed are rebuilt from
// their records and checked (see openSegments) before their index is trusted and sealed.

const sealHeader = "airlock audit index\n"

// indexSeal is what an index seal says, read from its record (and checked against its note).
type indexSeal struct {
	Node    string
	Segment string
	Last    uint64            // the sealed segment's last record
	Head    string            // its hash
	Sum     [sha256.Size]byte // the SHA-256 of the index (the checksum the file ends with)
	Seq     uint64            // the seal record's own seq
}

func (s indexSeal) text() string {
	return fmt.Sprintf("%snode %s\nsegment %s\nlast %d\nhead %s\nindex %x\n", sealHeader, s.Node, s.Segment, s.Last, s.Head, s.Sum)
}

// sealRecord is the record that seals a segment's index, signed when signer is set.
func sealRecord(s indexSeal, signer note.Signer) (Record, error) {
	r := Record{Kind: KindAudit, Event: EventIndex, Segment: s.Segment, SHA256: hex.EncodeToString(s.Sum[:]), Through: s.Last, Head: s.Head}
	if signer != nil {
		msg, err := note.Sign(&note.Note{Text: s.text()}, signer)
		if err != nil {
			return r, fmt.Errorf("audit: signing an index seal: %w", err)
		}
		r.Note = string(msg)
	}
	return r, nil
}

// sealOf reads the index seal in r and, when v is given, checks that its note is the node's
// signature over exactly what the record says. Without v the note is not checked: the seal is
// then worth what the chain around it is worth.
func sealOf(r *Record, v note.Verifier) (indexSeal, error) {
	s := indexSeal{Node: r.Node, Segment: r.Segment, Last: r.Through, Head: r.Head, Seq: r.Seq}
	sum, err := hex.DecodeString(r.SHA256)
	if err != nil || len(sum) != sha256.Size || hex.EncodeToString(sum) != r.SHA256 || r.Segment == "" || r.Through == 0 || len(r.Head) != hashLen {
		return s, errors.New("the index seal does not name a segment, its index's SHA-256, its last seq and that record's hash")
	}
	copy(s.Sum[:], sum)
	if v == nil {
		return s, nil
	}
	if r.Note == "" {
		return s, errors.New("the index seal is not signed")
	}
	text, err := openNote([]byte(r.Note), v)
	if err != nil {
		return s, fmt.Errorf("the index seal's note: %v", err)
	}
	n, err := parseSeal(text)
	if err != nil {
		return s, fmt.Errorf("the index seal's note: %v", err)
	}
	if n.Segment != s.Segment || n.Last != s.Last || n.Head != s.Head || n.Sum != s.Sum {
		return s, fmt.Errorf("the index seal's signed note seals %s (seq %d, index %x), not what the record says", n.Segment, n.Last, n.Sum)
	}
	if want, _ := strings.CutPrefix(v.Name(), "airlock-"); n.Node != want {
		return s, fmt.Errorf("the index seal's note is for node %q", n.Node)
	}
	return s, nil
}

func parseSeal(text string) (indexSeal, error) {
	var s indexSeal
	fields, err := noteFields(text, sealHeader, "index seal")
	if err != nil {
		return s, err
	}
	s.Node, s.Segment, s.Head = fields["node"], fields["segment"], fields["head"]
	if s.Last, err = strconv.ParseUint(fields["last"], 10, 64); err != nil {
		return s, fmt.Errorf("index seal last %q: %v", fields["last"], err)
	}
	sum, err := hex.DecodeString(fields["index"])
	if err != nil || len(sum) != sha256.Size {
		return s, fmt.Errorf("index seal index %q is not a SHA-256", fields["index"])
	}
	copy(s.Sum[:], sum)
	return s, nil
}

// indexSum is the SHA-256 an index file ends with: the hash of everything before it.
func indexSum(data []byte) (sum [sha256.Size]byte) {
	if len(data) >= sha256.Size {
		copy(sum[:], data[len(data)-sha256.Size:])
	}
	return sum
}

// segmentHead is what readSeals finds at the start of a segment: its first record (seq, prev
// and hash; Seq is 0 when that line does not verify on its own), and what is wrong with the lines
// it read there, so a reader that trusts the segment by its seal and reads nothing more of it
// still links it to the segment before and says what was done to its head.
type segmentHead struct {
	first    Record
	problems []Problem
}

// readSeals returns the index seals the trail's segments hold, by the segment each seals, and
// each segment's head. The node writes seals right after a segment's opening record, so only
// those records (and the one after them, to check its link) are read. A seal counts when its
// record verifies on its own and, when v is given, its note is the node's signature over what the
// record says (see sealOf); without v, when the record before it and the one after it link to it,
// so that editing it means rewriting the chain from there on. When one segment is sealed twice,
// the first seal counts. A line of the head that is not the segment's own opening record, or a
// seal that does not check, is a problem of the head; so is a line that does not verify on its
// own or does not link to the one before it, and it ends the head: no seal after it counts.
func readSeals(dir string, names []string, v note.Verifier) (map[string]indexSeal, map[string]segmentHead, error) {
	out := map[string]indexSeal{}
	heads := make(map[string]segmentHead, len(names))
	add := func(s indexSeal) {
		if _, dup := out[s.Segment]; !dup {
			out[s.Segment] = s
		}
	}
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted by retention since it was listed
		}
		if err != nil {
			return nil, nil, fmt.Errorf("audit: %w", err)
		}
		var h segmentHead
		line, prev, prevSeq := 0, "", uint64(0)
		bad := func(r *Record, format string, args ...any) error {
			h.problems = append(h.problems, Problem{Segment: name, Line: line, Seq: r.Seq, Reason: fmt.Sprintf(format, args...)})
			return errStop
		}
		var pending *indexSeal // an unsigned seal waiting for the record after it to link to it
		err = scanLines(f, func(_ []byte, _ int64, r *Record, lerr error) error {
			line++
			switch {
			case lerr != nil:
				return bad(r, "%s", describeLineError(lerr))
			case line == 1:
				h.first = Record{Seq: r.Seq, Prev: r.Prev, Hash: r.Hash}
			case r.Prev != prev || r.Seq != prevSeq+1:
				return bad(r, "chain broken: it does not follow seq %d, the record before it (a record of the segment's head was replaced, inserted or removed)", prevSeq)
			}
			if pending != nil {
				add(*pending)
				pending = nil
			}
			switch {
			case line == 1 && (r.Kind != KindAudit || r.Event != EventSegment):
				return bad(r, "the segment does not begin with its own opening record (it was cut at the front, renamed or assembled by hand)")
			case line == 1 && r.Segment != name:
				// Renamed: said, and the seals after it still count (they link to it, and a signed
				// one is the node's wherever it is).
				bad(r, "the segment does not begin with its own opening record (it was cut at the front, renamed or assembled by hand)")
			case line == 1:
			case r.Kind != KindAudit || r.Event != EventIndex:
				return errStop
			default:
				s, err := sealOf(r, v)
				switch {
				case err != nil:
					bad(r, "%v", err)
				case v != nil:
					add(s)
				default:
					pending = &s
				}
			}
			prev, prevSeq = r.Hash, r.Seq
			return nil
		})
		f.Close()
		if err != nil && !errors.Is(err, errStop) {
			return nil, nil, fmt.Errorf("audit: %s: %w", name, err)
		}
		heads[name] = h
	}
	return out, heads, nil
}

// sealedIndex reads the index of the sealed segment at path when it is the one s seals, and says
// why not otherwise: the file must end with the sealed hash (decodeIndex checks that it is the
// hash of the rest), and the segment's last record must be the one sealed, so an index left
// beside a segment rewritten since is not used either. Postings are decoded only when all is set.
func sealedIndex(path string, s indexSeal, all bool) (*index, error) {
	data, err := os.ReadFile(indexPath(path))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("its index, sealed at seq %d, is missing (deleted)", s.Seq)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if indexSum(data) != s.Sum {
		return nil, fmt.Errorf("its index is not the one sealed at seq %d (edited, swapped with another segment's, or left from another state of the trail)", s.Seq)
	}
	x, err := decodeIndex(data, [nFields]string{}, all)
	if err != nil {
		return nil, fmt.Errorf("its index is not the one sealed at seq %d (%v)", s.Seq, err)
	}
	if x.last() != s.Last {
		return nil, fmt.Errorf("its sealed index ends at seq %d, not the seq %d sealed", x.last(), s.Last)
	}
	r, err := readRecordAt(path, x.lastSpan())
	if err != nil || r.Seq != s.Last || r.Hash != s.Head {
		return nil, fmt.Errorf("its last record is not the one sealed at seq %d with its index (the segment was changed after it was sealed)", s.Seq)
	}
	return x, nil
}

// tamperedIndex is the problem a reader reports for a segment whose index is not the one sealed,
// or does not match the records it indexes.
func tamperedIndex(segment, why string) Problem {
	return Problem{Segment: segment, Reason: "tampered index: " + why}
}

// validIndexFile reports whether data is an index file of this version with its checksum right
// (whatever it indexes).
func validIndexFile(data []byte) bool {
	if len(data) < len(indexMagic)+sha256.Size || !bytes.HasPrefix(data, []byte(indexMagic)) {
		return false
	}
	return sha256.Sum256(data[:len(data)-sha256.Size]) == indexSum(data)
}
