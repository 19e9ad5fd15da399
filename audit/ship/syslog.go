package ship

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// syslogOut writes RFC 5424 messages over one TCP (or TLS) connection, octet-counted (RFC 6587
// 3.4.1: "LEN SP MSG"), so a record's newlines never split it. TCP carries no acknowledgement:
// a batch counts as delivered once it is written and flushed; after a broken connection the
// batch is sent again on a new one (a receiver may see a record twice). A receiver that closed
// the connection (a restart) is noticed before the next batch is written, since a write on a
// connection whose peer has gone succeeds into the kernel's buffer and would lose the batch;
// a receiver that vanishes without closing it can still lose what was written in between.
type syslogOut struct {
	addr   string
	tls    *tls.Config // nil: plain TCP
	host   string
	format string
	conn   net.Conn
	w      *bufio.Writer
}

func (o *syslogOut) deliver(ctx context.Context, recs []audit.Record) error {
	if o.conn != nil && !peerOpen(o.conn) {
		o.close()
	}
	if o.conn == nil {
		d := &net.Dialer{Timeout: 10 * time.Second}
		var c net.Conn
		var err error
		if o.tls != nil {
			conf := o.tls.Clone()
			if conf.ServerName == "" {
				conf.ServerName, _, _ = net.SplitHostPort(o.addr)
			}
			c, err = (&tls.Dialer{NetDialer: d, Config: conf}).DialContext(ctx, "tcp", o.addr)
		} else {
			c, err = d.DialContext(ctx, "tcp", o.addr)
		}
		if err != nil {
			return err
		}
		o.conn, o.w = c, bufio.NewWriterSize(c, 64<<10)
	}
	o.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	for i := range recs {
		msg, err := o.message(&recs[i])
		if err != nil {
			return permanent{err}
		}
		o.w.WriteString(strconv.Itoa(len(msg)))
		o.w.WriteByte(' ')
		o.w.Write(msg)
	}
	if err := o.w.Flush(); err != nil {
		o.close()
		return err
	}
	return nil
}

// peerOpen reports whether c's receiver has not closed it. A syslog receiver sends nothing,
// so a read that ends other than by the short deadline set for it (end of stream, a reset, or
// bytes no receiver should send) means the connection is no use.
func peerOpen(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (o *syslogOut) close() {
	if o.conn != nil {
		o.conn.Close()
		o.conn, o.w = nil, nil
	}
}

// syslog severities by decision: a refusal is a warning, a flagged one an error, the rest info;
// the facility is 13 (log audit).
func priority(r *audit.Record) int {
	sev := 6
	switch {
	case r.Flagged:
		sev = 3
	case r.Decision == audit.Deny:
		sev = 4
	}
	return 13*8 + sev
}

// message is r as one RFC 5424 message: header, airlock's structured data (seq, lease, tenant,
// decision, rule) and the record in the sink's format as MSG.
func (o *syslogOut) message(r *audit.Record) ([]byte, error) {
	body, err := format(r, o.format, o.host)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<%d>1 %s %s airlock - %s [airlock@32473 seq=\"%d\"", priority(r), r.Time.UTC().Format("2006-01-02T15:04:05.000000Z"),
		headerField(o.host, 255), headerField(string(r.Kind), 32), r.Seq)
	for _, p := range [][2]string{{"lease", r.Lease}, {"tenant", r.Tenant}, {"decision", string(r.Decision)}, {"rule", string(r.Rule)}} {
		if p[1] != "" {
			b.WriteString(" " + p[0] + "=\"" + sdValue(p[1]) + "\"")
		}
	}
	b.WriteString("] ")
	b.Write(body)
	return []byte(b.String()), nil
}

// headerField is v as an RFC 5424 header field: printable ASCII without spaces, at most n
// characters, "-" when empty.
func headerField(v string, n int) string {
	out := strings.Map(func(c rune) rune {
		if c < 33 || c > 126 {
			return '_'
		}
		return c
	}, v)
	if out == "" {
		return "-"
	}
	return out[:min(len(out), n)]
}

// sdValue escapes a structured-data parameter value (RFC 5424 6.3.3: '"', '\' and ']'), in
// valid UTF-8.
func sdValue(v string) string {
	v = strings.ToValidUTF8(v, "\uFFFD")
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, `]`, `\]`).Replace(v)
}
