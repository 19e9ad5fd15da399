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
	"os"
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

// Problem is one line of a trail that failed verification.
type Problem struct {
	Line   int    // 1-based line number in the file
	Seq    uint64 // the sequence number the line claims, when it could be read
	Reason string
}

func (p Problem) String() string {
	if p.Seq != 0 {
		return fmt.Sprintf("line %d (seq %d): %s", p.Line, p.Seq, p.Reason)
	}
	return fmt.Sprintf("line %d: %s", p.Line, p.Reason)
}

// TrailError lists the lines of a trail that failed verification. Read returns it after reading
// every line it could: a bad line never hides the good ones around it.
type TrailError struct {
	Path     string
	Problems []Problem
}

func (e *TrailError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "audit: %s: %d line(s) failed verification", e.Path, len(e.Problems))
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

// Read calls fn for each record of the trail at path that verifies, oldest first, checking the
// hash chain as it goes. A line that does not verify (edited, torn by a crash, unreadable) or does
// not link to the line before it (one deleted or reordered) is skipped and reported, by position,
// in the *TrailError returned at the end; an error from fn stops the read and is returned as is.
func Read(path string, fn func(Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return readTrail(f, path, fn)
}

// readTrail is Read over any reader; path names it in errors.
func readTrail(src io.Reader, path string, fn func(Record) error) error {
	br := bufio.NewReaderSize(src, 64<<10)
	var (
		err      error
		problems []Problem
		scratch  []byte
		long     []byte
		// lastGood is the hash of the last line that verified; claimed is the hash the line
		// after it (if that one failed) says it has, so the chain can be picked up on either
		// side of a bad line.
		lastGood, claimed string
		lastSeq           uint64
		first             = true
	)
	for n := 1; ; n++ {
		line, rerr := readLine(br, &long)
		if rerr == io.EOF && line == nil {
			break
		}
		if rerr != nil && rerr != io.EOF {
			if errors.Is(rerr, errLineTooLong) {
				problems = append(problems, Problem{Line: n, Reason: "longer than 64 MiB; skipped"})
				claimed = ""
				continue
			}
			return fmt.Errorf("audit: %s line %d: %w", path, n, rerr)
		}
		var r Record
		r, scratch, err = checkLine(line, scratch)
		if err != nil {
			problems = append(problems, Problem{Line: n, Seq: r.Seq, Reason: err.Error()})
			claimed, first = r.Hash, false
			if rerr == io.EOF {
				break
			}
			continue
		}
		// The record's own bytes verify; now its link. A broken link is reported where it is
		// found and the record is still read: the line before it may be the one that was
		// deleted or forged, and an unkeyed chain cannot tell which.
		switch {
		case first && r.Prev != "" && r.Seq == 1:
			problems = append(problems, Problem{Line: n, Seq: r.Seq, Reason: "the first record names a predecessor"})
		case !first && r.Prev != lastGood && (claimed == "" || r.Prev != claimed):
			problems = append(problems, Problem{Line: n, Seq: r.Seq,
				Reason: "chain broken (prev does not match the line before: one was deleted, reordered or inserted)"})
		case !first && claimed == "" && r.Seq != lastSeq+1:
			problems = append(problems, Problem{Line: n, Seq: r.Seq,
				Reason: fmt.Sprintf("sequence jumps from %d to %d", lastSeq, r.Seq)})
		}
		lastGood, lastSeq, claimed = r.Hash, r.Seq, ""
		if ferr := fn(r); ferr != nil {
			return ferr
		}
		first = false
		if rerr == io.EOF {
			break
		}
	}
	if len(problems) > 0 {
		return &TrailError{Path: path, Problems: problems}
	}
	return nil
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

// tail is where an existing trail's chain ends.
type tail struct {
	seq  uint64
	hash string
	torn bool // the file ends mid-line
}

// maxTailScan bounds how far back from the end readTail looks for a record that verifies.
const maxTailScan = 64 << 20

// readTail finds the last line of the trail at path whose hash covers its own bytes, reading
// backwards from the end, so opening a trail costs the same however long it is and a damaged
// line never stops the node from starting: the chain continues from the last good record, and
// Read reports the damage. A missing file is an empty trail.
func readTail(path string) (tail, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return tail{}, nil
	}
	if err != nil {
		return tail{}, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return tail{}, fmt.Errorf("audit: %w", err)
	}
	size := st.Size()
	if size == 0 {
		return tail{}, nil
	}
	var t tail
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, size-1); err != nil {
		return tail{}, fmt.Errorf("audit: %w", err)
	}
	t.torn = last[0] != '\n'
	const block = 64 << 10
	var buf []byte // the bytes from pos to the end of the last unexamined line
	pos := size
	if !t.torn {
		pos-- // the final newline
	}
	end := pos
	var scratch []byte
	for end > 0 && size-end <= maxTailScan {
		// Find the start of the line that ends at end.
		i := bytes.LastIndexByte(buf[:end-pos], '\n')
		for i < 0 && pos > 0 {
			n := min(int64(block), pos)
			chunk := make([]byte, n)
			if _, err := f.ReadAt(chunk, pos-n); err != nil {
				return tail{}, fmt.Errorf("audit: %w", err)
			}
			pos -= n
			buf = append(chunk, buf...)
			i = bytes.LastIndexByte(buf[:end-pos], '\n')
			if end-pos > maxLine {
				break
			}
		}
		line := buf[i+1 : end-pos]
		var r Record
		if r, scratch, err = checkLine(line, scratch); err == nil {
			t.seq, t.hash = r.Seq, r.Hash
			return t, nil
		}
		if i < 0 {
			break
		}
		end = pos + int64(i)
		buf = buf[:i]
	}
	return t, nil
}
