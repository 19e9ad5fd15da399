package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Every line ends with the record's hash as its last field: `,"hash":"<64 hex digits>"}`.
const (
	hashPrefix = `,"hash":"`
	hashLen    = 2 * sha256.Size
	hashTail   = len(hashPrefix) + hashLen + len(`"}`)
)

// maxLine bounds one line of the trail when reading; a longer line is reported and skipped.
const maxLine = 64 << 20

// Problem is one thing wrong with a trail: a record that fails its own check, a break in the
// chain, a gap, a segment that is not this node's, a checkpoint that does not verify.
type Problem struct {
	Segment string `json:"segment,omitempty"` // the segment's file name, when the problem is in one
	Line    int    `json:"line,omitempty"`    // 1-based line number in the segment, when known
	Seq     uint64 `json:"seq,omitempty"`     // the sequence number concerned, when known
	Reason  string `json:"reason"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Segment != "" {
		b.WriteString(p.Segment)
		if p.Line != 0 {
			fmt.Fprintf(&b, " line %d", p.Line)
		}
		if p.Seq != 0 {
			fmt.Fprintf(&b, " (seq %d)", p.Seq)
		}
		b.WriteString(": ")
	} else if p.Seq != 0 {
		fmt.Fprintf(&b, "seq %d: ", p.Seq)
	}
	b.WriteString(p.Reason)
	return b.String()
}

// TrailError lists what a read of a trail found wrong: records that failed their own check (left
// out), and indexes that were tampered with (the records were read without them). ReadDir returns
// it after reading every record it could: a bad line never hides the good ones around it.
type TrailError struct {
	Path     string
	Problems []Problem
}

func (e *TrailError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "audit: %s: %d problem(s) found reading it", e.Path, len(e.Problems))
	for i, p := range e.Problems {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-i)
			break
		}
		b.WriteString("; ")
		b.WriteString(p.String())
	}
	return b.String()
}

// checkLine parses one line of the trail and checks that its hash covers its own bytes: the hash
// is SHA-256 of the record's prev field followed by the line with the hash field taken out. It
// says nothing about the link to the line before (Read checks that).
func checkLine(line, scratch []byte) (Record, []byte, error) {
	var r Record
	n := len(line)
	if n < hashTail+1 || !bytes.Equal(line[n-hashTail:n-hashTail+len(hashPrefix)], []byte(hashPrefix)) ||
		!bytes.Equal(line[n-2:], []byte(`"}`)) {
		return r, scratch, errors.New("not a record of the trail (no hash as its last field)")
	}
	want := line[n-hashTail+len(hashPrefix) : n-2]
	if err := json.Unmarshal(line, &r); err != nil {
		return r, scratch, fmt.Errorf("not JSON: %v", err)
	}
	// The hashed bytes: prev, then the line without its hash field.
	scratch = append(append(append(scratch[:0], r.Prev...), line[:n-hashTail]...), '}')
	sum := sha256.Sum256(scratch)
	var got [hashLen]byte
	hex.Encode(got[:], sum[:])
	if !bytes.Equal(got[:], want) {
		return r, scratch, errors.New("hash does not match the record (edited)")
	}
	if err := r.restoreRaw(); err != nil {
		return r, scratch, err
	}
	return r, scratch, nil
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline (the last one may lack it), reusing *long
// for lines longer than the reader's buffer. A line over maxLine is consumed and reported with
// errLineTooLong. It returns io.EOF with a nil line at the end.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	if err == io.EOF {
		if len(line) == 0 {
			return nil, io.EOF
		}
		return line, io.EOF
	}
	if err != bufio.ErrBufferFull {
		return nil, err
	}
	buf := append((*long)[:0], line...)
	tooLong := false
	for {
		line, err = br.ReadSlice('\n')
		if !tooLong {
			buf = append(buf, line...)
			if len(buf) > maxLine {
				tooLong, buf = true, buf[:0]
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		*long = buf
		if tooLong {
			return nil, errLineTooLong
		}
		if err == nil {
			return buf[:len(buf)-1], nil
		}
		if err == io.EOF {
			return buf, io.EOF
		}
		return nil, err
	}
}

// scanLines calls fn for each line of a segment with its byte offset and the result of checking
// it on its own (checkLine). A line longer than maxLine is passed as empty, with an error. The
// last line may lack its newline (torn): torn is set on that call.
func scanLines(src io.Reader, fn func(line []byte, off int64, r *Record, err error) error) error {
	br := bufio.NewReaderSize(src, 64<<10)
	var long, scratch []byte
	var off int64
	for {
		line, rerr := readLine(br, &long)
		if rerr == io.EOF && line == nil {
			return nil
		}
		var r Record
		var err error
		switch {
		case errors.Is(rerr, errLineTooLong):
			err = errors.New("longer than 64 MiB")
			line = nil
		case rerr != nil && rerr != io.EOF:
			return rerr
		default:
			r, scratch, err = checkLine(line, scratch)
			if rerr == io.EOF {
				err = errTorn // no newline: the write stopped there
			}
		}
		if ferr := fn(line, off, &r, err); ferr != nil {
			return ferr
		}
		off += int64(len(line)) + 1
		if rerr == io.EOF {
			return nil
		}
	}
}

// errTorn marks a segment's last line when it has no newline: a write stopped mid-record.
var errTorn = errors.New("the segment ends mid-record (the write was cut: a crash, or the file was truncated)")
