package devcontainer

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// syntaxError is something wrong at byte offset off of the file.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return e.msg }

// standardize turns JSON with comments (// and /* */) and trailing commas, as devcontainer.json
// allows, into plain JSON of the same length: what it drops becomes spaces and newlines stay,
// so an offset in the result is the same offset in the file.
func standardize(in []byte) ([]byte, error) {
	out := bytes.Clone(in)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if out[i] != '\n' {
				out[i] = ' '
			}
		}
	}
	lastComma := -1 // a comma with only blanks and comments after it so far
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case c == '"':
			j := i + 1
			for j < len(out) && out[j] != '"' {
				if out[j] == '\\' {
					j++
				}
				j++
			}
			i, lastComma = j, -1 // an unterminated string is left for the JSON decoder to report
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			j := bytes.IndexByte(out[i:], '\n')
			if j < 0 {
				j = len(out) - i
			}
			blank(i, i+j)
			i += j - 1
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			j := bytes.Index(out[i+2:], []byte("*/"))
			if j < 0 {
				return nil, &syntaxError{off: i, msg: "a /* comment is never closed"}
			}
			blank(i, i+2+j+2)
			i += 2 + j + 1
		case c == ',':
			lastComma = i
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastComma = -1
		}
	}
	return out, nil
}

// field is one top-level member: its name, where its name starts, and its value.
type field struct {
	name  string
	off   int
	value json.RawMessage
}

// topLevel splits a JSON object into its members, in file order, with their offsets. A name
// given twice is refused: JSON decoders disagree on which one wins.
func topLevel(b []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("the file must hold one JSON object")
	}
	var out []field
	seen := map[string]bool{}
	for dec.More() {
		off := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name := tok.(string) // inside an object, the decoder only yields names here
		// The offset before the name may sit on the previous line's comma: step to the name.
		for off < len(b) && (b[off] == ',' || b[off] == ' ' || b[off] == '\t' || b[off] == '\n' || b[off] == '\r') {
			off++
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, &syntaxError{off: off, msg: fmt.Sprintf("%s is given twice", name)}
		}
		seen[name] = true
		out = append(out, field{name: name, off: off, value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value in the file")
	}
	return out, nil
}
