package gateway

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"strings"
)

// decoded returns body with the content codings named in encoding undone, innermost last, for
// the codings the gateway can undo (gzip, x-gzip, deflate); ok is false for any other, which
// then cannot be scrubbed.
func decoded(body io.ReadCloser, encoding string) (io.ReadCloser, string, bool) {
	codings := strings.Split(encoding, ",")
	r := io.ReadCloser(body)
	for i := len(codings) - 1; i >= 0; i-- {
		c := strings.ToLower(strings.TrimSpace(codings[i]))
		switch c {
		case "", "identity":
		case "gzip", "x-gzip":
			r = &lazyGzip{src: r}
		case "deflate":
			r = &zlibOrFlate{src: r}
		default:
			return nil, c, false
		}
	}
	return r, "", true
}

// lazyGzip opens the gzip stream on first read, so a malformed one fails the body, not the
// response header.
type lazyGzip struct {
	src io.ReadCloser
	z   *gzip.Reader
	err error
}

func (l *lazyGzip) Read(p []byte) (int, error) {
	if l.z == nil && l.err == nil {
		l.z, l.err = gzip.NewReader(l.src)
		if l.err != nil {
			l.err = fmt.Errorf("upstream's gzip body: %w", l.err)
		}
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.z.Read(p)
}

func (l *lazyGzip) Close() error { return l.src.Close() }

// zlibOrFlate undoes "deflate", which servers send either zlib-wrapped (as RFC 9110 says) or
// raw: the first two bytes tell which.
type zlibOrFlate struct {
	src io.ReadCloser
	r   io.Reader
	err error
}

func (z *zlibOrFlate) Read(p []byte) (int, error) {
	if z.r == nil && z.err == nil {
		br := bufio.NewReader(z.src)
		hdr, _ := br.Peek(2)
		if len(hdr) == 2 && hdr[0]&0x0f == 8 && (uint16(hdr[0])<<8|uint16(hdr[1]))%31 == 0 {
			z.r, z.err = zlib.NewReader(br)
		} else {
			z.r = flate.NewReader(br)
		}
		if z.err != nil {
			z.err = fmt.Errorf("upstream's deflate body: %w", z.err)
		}
	}
	if z.err != nil {
		return 0, z.err
	}
	return z.r.Read(p)
}

func (z *zlibOrFlate) Close() error { return z.src.Close() }
