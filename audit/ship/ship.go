// Package ship delivers the audit trail to the tools security teams already run: syslog (RFC
// 5424, octet-counted over TCP or TLS) and HTTP endpoints that take batches of JSON (Splunk HEC,
// Vector, any collector). A shipper reads what the trail has durably written, from a cursor it
// keeps on disk, so it never stands between a request and its record: a receiver that is down
// or slow delays delivery, never traffic, and a restart resumes where delivery stopped.
package ship

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/audit"
)

// Config is one push sink.
type Config struct {
	Name string `yaml:"name"`
	// Type is syslog or http.
	Type string `yaml:"type"`
	// Address is the syslog receiver's HOST:PORT; TLS makes it RFC 5425 (syslog over TLS).
	Address string `yaml:"address"`
	TLS     bool   `yaml:"tls"`
	// URL is where an http sink POSTs its batches.
	URL string `yaml:"url"`
	// CAFile holds the roots the receiver's certificate is checked against (besides the
	// system's), for syslog over TLS and https.
	CAFile string `yaml:"ca_file"`
	// TokenFile holds a token sent as "Authorization: <AuthScheme> <token>" (AuthScheme:
	// Splunk for HEC; default Bearer).
	TokenFile  string `yaml:"token_file"`
	AuthScheme string `yaml:"auth_scheme"`
	// Format of each record: json (the trail's own line, hash chain included), ocsf or ecs;
	// an http sink may also say hec (each record wrapped as a Splunk HEC event).
	Format string `yaml:"format"`
	// Batch is how many records one delivery carries at most (default 500).
	Batch int `yaml:"batch"`
	// Backlog bounds how far delivery may fall behind the trail, in records (default 100000):
	// beyond it the oldest undelivered are skipped, counted, and stay in the local trail.
	Backlog int `yaml:"backlog"`
}

// Validate names what is wrong with c.
func (c Config) Validate() error {
	switch {
	case c.Name == "" || strings.ContainsAny(c.Name, "/\\ \x00"):
		return errors.New("name must be set, without slashes or spaces (it names the sink's cursor file and metrics)")
	case c.Type == "syslog" && c.Address == "":
		return errors.New("a syslog sink needs address (HOST:PORT)")
	case c.Type == "http" && !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://"):
		return errors.New("an http sink needs url (http:// or https://)")
	case c.Type != "syslog" && c.Type != "http":
		return fmt.Errorf("type %q is not syslog or http", c.Type)
	case c.Format != "" && c.Format != "json" && c.Format != "ocsf" && c.Format != "ecs" && (c.Format != "hec" || c.Type != "http"):
		return fmt.Errorf("format %q is not json, ocsf or ecs (or hec, for http)", c.Format)
	case c.Batch < 0 || c.Batch > 10000 || c.Backlog < 0:
		return errors.New("batch must be 0 to 10000 and backlog >= 0")
	}
	return nil
}

// Trail is what a shipper reads.
type Trail interface {
	Query(ctx context.Context, q audit.Query, fn func(audit.Record) error) (audit.Result, error)
	// Written is the seq of the last record on the file.
	Written() uint64
}

// The node's trail; package audit cannot name this interface, so the guard stands beside it.
var _ Trail = (*audit.FileSink)(nil)

// deliverer sends one batch of formatted records; an error means none of it may count as
// delivered. permanent errors (the receiver refused the batch as such) are not retried.
type deliverer interface {
	deliver(ctx context.Context, recs []audit.Record) error
	close()
}

type permanent struct{ error }

// Shipper delivers one sink's records.
type Shipper struct {
	cfg    Config
	trail  Trail
	cursor string // the file holding the seq of the last record delivered
	out    deliverer
	log    *slog.Logger
	poll   time.Duration

	delivered, failures, dropped, rejected atomic.Uint64
	lastDelivery                           atomic.Int64
	behind                                 atomic.Int64
}

// New makes a shipper for cfg over trail, keeping its cursor in stateDir. node names the
// records' host in syslog and HEC.
func New(cfg Config, trail Trail, stateDir, node string, log *slog.Logger) (*Shipper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("audit sink %q: %w", cfg.Name, err)
	}
	if cfg.Batch == 0 {
		cfg.Batch = 500
	}
	if cfg.Backlog == 0 {
		cfg.Backlog = 100000
	}
	if cfg.Format == "" {
		cfg.Format = "json"
	}
	var roots *x509.CertPool
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("audit sink %q: ca_file: %w", cfg.Name, err)
		}
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("audit sink %q: ca_file %s holds no certificate", cfg.Name, cfg.CAFile)
		}
	}
	tlsConf := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	s := &Shipper{cfg: cfg, trail: trail, cursor: filepath.Join(stateDir, "ship-"+cfg.Name+".cursor"), log: log, poll: 250 * time.Millisecond}
	switch cfg.Type {
	case "syslog":
		if !cfg.TLS {
			tlsConf = nil
		}
		s.out = &syslogOut{addr: cfg.Address, tls: tlsConf, host: node, format: cfg.Format}
	case "http":
		token := ""
		if cfg.TokenFile != "" {
			b, err := os.ReadFile(cfg.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("audit sink %q: token_file: %w", cfg.Name, err)
			}
			token = strings.TrimSpace(string(b))
		}
		s.out = newHTTPOut(cfg, tlsConf, token, node)
	}
	return s, nil
}

// Run delivers until ctx ends: it reads up to Batch records after the cursor, delivers them,
// moves the cursor, and waits for more when it has caught up. A failed delivery is retried
// with backoff (1s doubling to 30s) from the same cursor; a batch the receiver refuses as such
// is skipped and counted.
func (s *Shipper) Run(ctx context.Context) {
	defer s.out.close()
	after := s.readCursor()
	backoff := time.Second
	for ctx.Err() == nil {
		head := s.trail.Written()
		if head > after+uint64(s.cfg.Backlog) {
			skip := head - uint64(s.cfg.Backlog) - after
			s.dropped.Add(skip)
			s.log.Warn("audit sink fell behind its backlog bound: the oldest undelivered records are skipped (they stay in the local trail)",
				"sink", s.cfg.Name, "skipped", skip, "backlog", s.cfg.Backlog)
			after += skip
			s.writeCursor(after)
		}
		var batch []audit.Record
		_, err := s.trail.Query(ctx, audit.Query{After: after, Limit: s.cfg.Batch}, func(r audit.Record) error {
			batch = append(batch, r)
			return nil
		})
		if err != nil {
			s.log.Error("audit sink cannot read the trail", "sink", s.cfg.Name, "err", err)
			sleep(ctx, backoff)
			continue
		}
		if len(batch) > 0 && batch[0].Seq > after+1 && after > 0 {
			s.dropped.Add(batch[0].Seq - after - 1) // deleted by retention before delivery
		}
		s.behind.Store(int64(head - min(head, after)))
		if len(batch) == 0 {
			sleep(ctx, s.poll)
			continue
		}
		err = s.out.deliver(ctx, batch)
		var perm permanent
		switch {
		case errors.As(err, &perm):
			s.rejected.Add(uint64(len(batch)))
			s.log.Error("audit sink refused a batch; it is skipped (it stays in the local trail)", "sink", s.cfg.Name,
				"first_seq", batch[0].Seq, "records", len(batch), "err", err)
		case err != nil:
			s.failures.Add(1)
			if ctx.Err() == nil {
				s.log.Warn("audit sink delivery failed; retrying", "sink", s.cfg.Name, "err", err, "in", backoff)
			}
			sleep(ctx, backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		default:
			s.delivered.Add(uint64(len(batch)))
			s.lastDelivery.Store(time.Now().Unix())
		}
		backoff = time.Second
		after = batch[len(batch)-1].Seq
		s.writeCursor(after)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// readCursor returns the seq last delivered (0: none; a cursor file that cannot be read starts
// from the beginning, which may deliver records twice, never loses them).
func (s *Shipper) readCursor() uint64 {
	b, err := os.ReadFile(s.cursor)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		s.log.Warn("audit sink cursor unreadable; delivering from the start of the trail", "sink", s.cfg.Name, "file", s.cursor)
		return 0
	}
	return n
}

func (s *Shipper) writeCursor(seq uint64) {
	tmp := s.cursor + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(seq, 10)+"\n"), 0o600); err == nil {
		err = os.Rename(tmp, s.cursor)
		if err != nil {
			s.log.Error("audit sink cursor not saved", "sink", s.cfg.Name, "err", err)
		}
	}
}

// Collectors are the sink's delivery metrics, labelled by sink.
func (s *Shipper) Collectors() []prometheus.Collector {
	labels := prometheus.Labels{"sink": s.cfg.Name}
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return float64(v.Load()) })
	}
	gauge := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		counter("airlock_audit_ship_delivered_total", "Audit records delivered to the sink.", &s.delivered),
		counter("airlock_audit_ship_failures_total", "Deliveries to the sink that failed and were retried.", &s.failures),
		counter("airlock_audit_ship_dropped_total", "Audit records skipped because delivery fell behind the backlog bound or retention deleted them first (they are, or were, in the local trail).", &s.dropped),
		counter("airlock_audit_ship_rejected_total", "Audit records in batches the receiver refused as such (not retried).", &s.rejected),
		gauge("airlock_audit_ship_backlog", "Audit records written but not yet delivered to the sink.", &s.behind),
		gauge("airlock_audit_ship_last_delivery_timestamp_seconds", "When the sink last took a batch (unix time).", &s.lastDelivery),
	}
}
