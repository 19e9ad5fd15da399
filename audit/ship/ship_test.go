package ship

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/wait"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func trail(t *testing.T, n int) *audit.FileSink {
	t.Helper()
	s, err := audit.OpenFile(audit.FileConfig{Dir: t.TempDir(), Node: "n1", SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	write(t, s, 0, n)
	return s
}

func write(t *testing.T, s *audit.FileSink, from, n int) {
	for i := from; i < from+n; i++ {
		d := audit.Allow
		if i%5 == 0 {
			d = audit.Deny
		}
		if err := s.Write(context.Background(), audit.Record{Kind: audit.KindHTTP, Lease: "l-1", Tenant: "acme", Decision: d,
			Host: "a.example", Path: fmt.Sprintf("/%d\n\"]\xff", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// receiver collects POSTed NDJSON lines; fail makes it answer 503.
type receiver struct {
	mu    sync.Mutex
	lines []string
	fail  atomic.Int32 // 0 ok, 1 answer 503, 2 answer 400
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch rc.fail.Load() {
	case 1:
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	case 2:
		http.Error(w, "bad token", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Authorization") != "Splunk tok" {
		http.Error(w, "no auth", http.StatusUnauthorized)
		return
	}
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.lines = append(rc.lines, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	rc.mu.Unlock()
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.lines)
}

func run(t *testing.T, s *Shipper) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// Every record reaches the HTTP receiver in order as the trail's own line (so the receiver can
// check the chain); a receiver that fails delays delivery and loses nothing; a restart resumes
// from the cursor without sending anything twice.
func TestHTTPDelivery(t *testing.T) {
	s := trail(t, 1200)
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	state := t.TempDir()
	os.WriteFile(filepath.Join(state, "tok"), []byte("tok\n"), 0o600)
	cfg := Config{Name: "hec", Type: "http", URL: srv.URL, TokenFile: filepath.Join(state, "tok"), AuthScheme: "Splunk", Batch: 100}
	sh, err := New(cfg, s, state, "n1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, sh)
	want := int(s.Written())
	if err := wait.Until(30*time.Second, "every record at the receiver", func() bool { return rc.count() == want }); err != nil {
		t.Fatal(err)
	}
	stop()
	var prev string
	for i, line := range rc.lines {
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Seq != uint64(i+1) || r.Prev != prev {
			t.Fatalf("line %d does not continue the chain: %s (%v)", i, line, err)
		}
		prev = r.Hash
	}
	// The receiver fails for a while: nothing is lost, failures are counted.
	rc.fail.Store(1)
	sh, _ = New(cfg, s, state, "n1", quiet)
	sh.poll = 10 * time.Millisecond
	stop = run(t, sh)
	write(t, s, 1200, 50)
	if err := wait.Until(30*time.Second, "a failed delivery", func() bool { return sh.failures.Load() > 0 }); err != nil {
		t.Fatal(err)
	}
	rc.fail.Store(0)
	// The trail may still grow after the writes return (a sealed segment's index record comes
	// after it), so the wait compares with what it holds at each look, not at one moment
	// before: the CI failure was 1276 delivered of 1263 counted too early.
	if err := wait.Until(30*time.Second, "the records written while the receiver failed", func() bool { return rc.count() == int(s.Written()) }); err != nil {
		t.Fatalf("%v (have %d of %d)", err, rc.count(), s.Written())
	}
	stop()
	seen := map[uint64]bool{}
	for _, line := range rc.lines {
		var r audit.Record
		json.Unmarshal([]byte(line), &r)
		if seen[r.Seq] {
			t.Fatalf("seq %d delivered twice", r.Seq)
		}
		seen[r.Seq] = true
	}
	// A batch the receiver refuses as such is skipped and counted, not retried forever.
	rc.fail.Store(2)
	sh, _ = New(cfg, s, state, "n1", quiet)
	stop = run(t, sh)
	write(t, s, 1250, 3)
	if err := wait.Until(30*time.Second, "the refused batch to be counted", func() bool { return sh.rejected.Load() > 0 }); err != nil {
		t.Fatal(err)
	}
	stop()
}

// A sink that falls further behind than its backlog skips the oldest, counts them, and delivers
// the newest.
func TestBacklogBound(t *testing.T) {
	s := trail(t, 500)
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	state := t.TempDir()
	os.WriteFile(filepath.Join(state, "tok"), []byte("tok"), 0o600)
	sh, err := New(Config{Name: "v", Type: "http", URL: srv.URL, Format: "ocsf", TokenFile: filepath.Join(state, "tok"), AuthScheme: "Splunk", Backlog: 100}, s, state, "n1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, sh)
	defer stop()
	if err := wait.Until(30*time.Second, "the newest 100 records", func() bool { return rc.count() == 100 }); err != nil {
		t.Fatal(err)
	}
	if d := sh.dropped.Load(); d != s.Written()-100 {
		t.Fatalf("dropped %d, want %d", d, s.Written()-100)
	}
	var ev map[string]any
	json.Unmarshal([]byte(rc.lines[0]), &ev)
	if ev["class_uid"] == nil {
		t.Fatalf("an ocsf sink delivered %s", rc.lines[0])
	}
}

// syslog frames: octet-counted RFC 5424 messages, read back whole whatever the record holds.
func TestSyslogFraming(t *testing.T) {
	s := trail(t, 20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	msgs := make(chan string, 100)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		for {
			n, err := br.ReadString(' ')
			if err != nil {
				return
			}
			l, _ := strconv.Atoi(strings.TrimSpace(n))
			b := make([]byte, l)
			if _, err := io.ReadFull(br, b); err != nil {
				return
			}
			msgs <- string(b)
		}
	}()
	sh, err := New(Config{Name: "sys", Type: "syslog", Address: ln.Addr().String()}, s, t.TempDir(), "node 1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, sh)
	defer stop()
	for i := range int(s.Written()) {
		select {
		case m := <-msgs:
			if !strings.HasPrefix(m, "<") || !strings.Contains(m, ">1 ") || !strings.Contains(m, " node_1 airlock - ") ||
				!strings.Contains(m, fmt.Sprintf(`[airlock@32473 seq="%d"`, i+1)) {
				t.Fatalf("message %d: %q", i, m)
			}
			if strings.Contains(m, `decision="deny"`) && !strings.HasPrefix(m, "<108>") {
				t.Fatalf("a denial is not a warning: %q", m)
			}
			body := m[strings.Index(m, "] ")+2:]
			var r audit.Record
			if err := json.Unmarshal([]byte(body), &r); err != nil || r.Seq != uint64(i+1) {
				t.Fatalf("message %d's record: %v %q", i, err, body)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("waited 30s for syslog message %d", i)
		}
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, c := range []Config{{}, {Name: "a/b", Type: "http", URL: "http://x"}, {Name: "a", Type: "syslog"},
		{Name: "a", Type: "http", URL: "ftp://x"}, {Name: "a", Type: "kafka"}, {Name: "a", Type: "syslog", Address: "x:1", Format: "hec"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v was accepted", c)
		}
	}
}

// TestSyslogReceiverRestart closes the receiver's side of the connection after the first
// batch, as a restarting rsyslog does, and listens again on the same port: the next batch must
// reach the new connection, not vanish into the old one's buffer with no error.
func TestSyslogReceiverRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 10)
	serve := func(c net.Conn, close bool) {
		br := bufio.NewReader(c)
		n, err := br.ReadString(' ')
		if err == nil {
			l, _ := strconv.Atoi(strings.TrimSpace(n))
			b := make([]byte, l)
			if _, err := io.ReadFull(br, b); err == nil {
				got <- string(b)
			}
		}
		if close {
			c.Close()
		}
	}
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c, i == 0)
		}
	}()
	o := &syslogOut{addr: ln.Addr().String(), host: "n1", format: "json"}
	defer o.close()
	rec := func(seq uint64) []audit.Record {
		return []audit.Record{{Seq: seq, Kind: "lease", Lease: fmt.Sprintf("l-%d", seq)}}
	}
	for seq := uint64(1); seq <= 2; seq++ {
		if err := o.deliver(context.Background(), rec(seq)); err != nil {
			t.Fatalf("batch %d: %v", seq, err)
		}
		select {
		case m := <-got:
			if !strings.Contains(m, fmt.Sprintf(`seq="%d"`, seq)) {
				t.Fatalf("batch %d arrived as %q", seq, m)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %d never reached the receiver (written into a connection it had closed)", seq)
		}
		if seq == 1 {
			// The receiver's close reaches this side before the next batch: the sender's own
			// check of its connection sees it.
			wait.For(t, 10*time.Second, "the receiver's close to reach the sender's side", func() bool { return !peerOpen(o.conn) })
		}
	}
}
