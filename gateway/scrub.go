package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

const redacted = "[redacted]"

// scrubForms returns the forms in which a secret value could come back in a response: plain,
// base64 (standard and URL alphabets, padded or not), URL-escaped and JSON-escaped.
func scrubForms(values []string) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	add := func(s string) {
		if len(s) >= 4 && !seen[s] {
			seen[s] = true
			out = append(out, []byte(s))
		}
	}
	for _, v := range values {
		add(v)
		add(base64.StdEncoding.EncodeToString([]byte(v)))
		add(base64.RawStdEncoding.EncodeToString([]byte(v)))
		add(base64.URLEncoding.EncodeToString([]byte(v)))
		add(base64.RawURLEncoding.EncodeToString([]byte(v)))
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
		if j, err := json.Marshal(v); err == nil {
			add(string(j[1 : len(j)-1]))
		}
	}
	return out
}

// scrubHeaders removes every form of the secret from response header values.
func scrubHeaders(h http.Header, forms [][]byte) {
	for k, vs := range h {
		for i, v := range vs {
			for _, f := range forms {
				v = strings.ReplaceAll(v, string(f), redacted)
			}
			vs[i] = v
		}
		h[k] = vs
	}
}

// isText reports whether a body of this type is text worth scrubbing.
func isText(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return contentType == ""
	}
	return strings.HasPrefix(mt, "text/") || strings.HasSuffix(mt, "json") || strings.HasSuffix(mt, "xml") ||
		strings.Contains(mt, "javascript") || mt == "application/x-www-form-urlencoded"
}

// scrubBytes replaces every form in b.
func scrubBytes(b []byte, forms [][]byte) []byte {
	for _, f := range forms {
		if bytes.Contains(b, f) {
			b = bytes.ReplaceAll(b, f, []byte(redacted))
		}
	}
	return b
}

// scrubReader replaces secret forms in a stream, holding back just enough bytes at each chunk's
// end that a value split across reads is still caught.
type scrubReader struct {
	src   io.ReadCloser
	forms [][]byte
	keep  int // longest form minus one
	buf   []byte
	out   []byte
	eof   bool
}

func newScrubReader(src io.ReadCloser, forms [][]byte) *scrubReader {
	keep := 0
	for _, f := range forms {
		keep = max(keep, len(f)-1)
	}
	return &scrubReader{src: src, forms: forms, keep: keep}
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			return 0, io.EOF
		}
		chunk := copyBuffers.Get()
		n, err := s.src.Read(chunk)
		s.buf = append(s.buf, chunk[:n]...)
		copyBuffers.Put(chunk)
		s.buf = scrubBytes(s.buf, s.forms)
		if err != nil {
			if err != io.EOF {
				return 0, err
			}
			s.eof = true
			s.out, s.buf = s.buf, nil
			continue
		}
		if cut := len(s.buf) - s.keep; cut > 0 {
			s.out = append(s.out[:0], s.buf[:cut]...)
			s.buf = append(s.buf[:0], s.buf[cut:]...)
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *scrubReader) Close() error { return s.src.Close() }
