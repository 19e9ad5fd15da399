package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/receipt"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/pool"
)

// This file is the pip cache a template declares, on a node of its own: a lease that asks to
// write it back leaves pip's downloads for the tenant's next lease of the template, whose
// `pip install` of the same packages fetches only the index pages. The packages come from a
// mirror of the test's own, which sends the cache headers the public index and file host send.

// cacheSpec is the node of this file: the python template keeps pip's cache per tenant.
var cacheSpec = nodeSpec{Name: "e2e-caches", Network: "airlock-e2e-caches", Bridge: "airlock-e2ec", Subnet: "10.228.0.0/24", MinWarm: 0,
	Gateway: `    - {host: ` + mirrorHost + `, port: 443, address: "UPSTREAM"}
  mirrors:
    - {host: pypi.org, to: "https://` + mirrorHost + `"}
    - {host: files.pythonhosted.org, to: "https://` + mirrorHost + `"}
`,
	Templates: `  - {name: python, image: "airlock/python:latest", min_warm: 2, max_total: 4, memory_mb: 1024, workspace_mb: 512, wait_for: 2m,
     caches: [{name: pip, path: "~/.cache/pip", max_mb: 128}]}
`}

// pipPackages are what each install asks for, and the size of each one's wheel: a few
// packages, 12 MiB in all, of content that does not compress (as a wheel's mostly does not).
var pipPackages = []struct {
	name string
	size int
}{{"airlock-bench-a", 6 << 20}, {"airlock-bench-b", 3 << 20}, {"airlock-bench-c", 2 << 20}, {"airlock-bench-d", 1 << 20}, {"airlock-bench-e", 512 << 10}}

// packageMirror serves pipPackages as a PEP 503 index and file host, with the public index's
// cache headers (an index page for 10 minutes, with an ETag; a file forever), and counts what
// it sends.
type packageMirror struct {
	srv    *httptest.Server
	wheels map[string][]byte // by file name
	// rate, when set, is the bytes a second the mirror sends a file at: the pace of a link to
	// a public index, where loopback has none.
	rate  atomic.Int64
	mu    sync.Mutex
	asked []string // "PATH STATUS BYTES" of every answer
}

func startPackageMirror(tb testing.TB) *packageMirror {
	tb.Helper()
	m := &packageMirror{wheels: map[string][]byte{}}
	rng := rand.New(rand.NewChaCha8([32]byte{'a', 'i', 'r', 'l', 'o', 'c', 'k'}))
	mux := http.NewServeMux()
	for _, p := range pipPackages {
		file, wheel := benchWheel(rng, p.name, p.size)
		m.wheels[file] = wheel
		sum := sha256.Sum256(wheel)
		page := fmt.Sprintf("<!DOCTYPE html><html><body><a href=\"https://files.pythonhosted.org/packages/%s#sha256=%s\">%s</a></body></html>\n", file, hex.EncodeToString(sum[:]), file)
		mux.HandleFunc("GET /simple/"+p.name+"/", m.counting(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Cache-Control", "max-age=600, public")
			w.Header().Set("ETag", fmt.Sprintf(`"%x"`, sha256.Sum256([]byte(page))))
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(page))
		}))
		mux.HandleFunc("GET /packages/"+file, m.counting(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Cache-Control", "max-age=365000000, immutable, public")
			http.ServeContent(&pacedWriter{ResponseWriter: w, rate: m.rate.Load(), start: time.Now()}, r, "", time.Time{}, bytes.NewReader(wheel))
		}))
	}
	cert, err := selfSigned("api.example.test", mirrorHost)
	if err != nil {
		tb.Fatal(err)
	}
	m.srv = httptest.NewUnstartedServer(mux)
	m.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	m.srv.StartTLS()
	tb.Cleanup(m.srv.Close)
	return m
}

// counting is h, recording what it answered.
func (m *packageMirror) counting(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		h(cw, r)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.asked = append(m.asked, fmt.Sprintf("%s %d %d", r.URL.Path, cw.status, cw.n))
	}
}

// answers are the mirror's answers since the last call, "PATH STATUS BYTES".
func (m *packageMirror) answers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.asked
	m.asked = nil
	return out
}

// countingWriter counts what a handler answers.
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *countingWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

// pacedWriter sends at most rate bytes a second (zero: as fast as it can), in 64 KiB pieces.
type pacedWriter struct {
	http.ResponseWriter
	rate  int64
	start time.Time
	sent  int64
}

func (w *pacedWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), 64<<10)
		if w.rate > 0 {
			// The link's pace, not a wait for something to happen: the piece leaves when a
			// link of this rate would have carried what went before it.
			time.Sleep(time.Until(w.start.Add(time.Duration(w.sent * int64(time.Second) / w.rate))))
		}
		m, err := w.ResponseWriter.Write(p[:n])
		written, w.sent, p = written+m, w.sent+int64(m), p[m:]
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// benchWheel is a wheel (PEP 427) of name 1.0 holding size bytes of data from rng, stored as
// they are: its file name and bytes.
func benchWheel(rng *rand.Rand, name string, size int) (string, []byte) {
	mod := strings.ReplaceAll(name, "-", "_")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	files := []struct {
		name string
		body []byte
	}{
		{mod + "/__init__.py", []byte("SIZE = " + fmt.Sprint(size) + "\n")},
		{mod + "/data.bin", data},
		{mod + "-1.0.dist-info/METADATA", []byte("Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n")},
		{mod + "-1.0.dist-info/WHEEL", []byte("Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n")},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: f.name, Method: zip.Store})
		w.Write(f.body)
		sum := sha256.Sum256(f.body)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(mod + "-1.0.dist-info/RECORD,,\n")
	w, _ := zw.Create(mod + "-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	zw.Close()
	return mod + "-1.0-py3-none-any.whl", buf.Bytes()
}

// startCacheNode starts this file's node, with the mirror as its upstream, stopped when tb ends.
func startCacheNode(tb testing.TB, m *packageMirror) *nodeProc {
	tb.Helper()
	dir := tb.TempDir()
	cfg, err := cacheSpec.write(dir, &upstream{srv: m.srv})
	if err != nil {
		tb.Fatal(err)
	}
	n, err := launch(cacheSpec, dir+"/state", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := n.shutdown(); err != nil {
			tb.Error(err)
		}
	})
	return n
}

// pipRound is one lease's install of pipPackages into a new virtualenv: how long the lease,
// the install and the release took, and the bytes the gateway recorded coming down for the
// lease's requests.
type pipRound struct {
	lease                  apitype.LeaseView
	leased, install, ended time.Duration
	egress                 int64
	mirror                 []string
}

// installRound leases python (with the flags of req), installs pipPackages with pip's cache
// at its default place, and releases the lease.
func installRound(tb testing.TB, n *nodeProc, m *packageMirror, req apitype.LeaseRequest) pipRound {
	tb.Helper()
	ctx := context.Background()
	c := n.goClient()
	req.Template, req.Allow = "python", []string{"@pypi"}
	var r pipRound
	start := time.Now()
	l, err := c.Lease(ctx, req)
	if err != nil {
		tb.Fatalf("lease: %v", err)
	}
	r.lease, r.leased = l, time.Since(start)
	released := false
	defer func() {
		if !released {
			c.Release(ctx, l.ID)
		}
	}()
	run := func(script string) {
		tb.Helper()
		var out, errs bytes.Buffer
		code, err := c.Exec(ctx, l.ID, apitype.ExecRequest{Cmd: []string{"bash", "-c", script}, Timeout: "5m"}, &out, &errs)
		if err != nil || code != 0 {
			tb.Fatalf("%s: exit %d, %v\n%s\n%s", script, code, err, out.String(), errs.String())
		}
	}
	run("python3 -m venv --system-site-packages /workspace/venv")
	m.answers()
	var names []string
	for _, p := range pipPackages {
		names = append(names, p.name)
	}
	start = time.Now()
	run("/workspace/venv/bin/pip install --disable-pip-version-check --progress-bar off " + strings.Join(names, " "))
	r.install = time.Since(start)
	start = time.Now()
	if err := c.Release(ctx, l.ID); err != nil {
		tb.Fatalf("release: %v", err)
	}
	r.ended, released = time.Since(start), true
	// The gateway records a request once its answer has gone down: wait for a record of
	// each answer the mirror gave.
	r.mirror = m.answers()
	recs := leaseTrail(tb, n, l.ID, func(recs []audit.Record) bool {
		seen := 0
		for _, rec := range recs {
			if rec.Kind == audit.KindHTTP && (strings.HasPrefix(rec.Path, "/simple/") || strings.HasPrefix(rec.Path, "/packages/")) {
				seen++
			}
		}
		return seen >= len(r.mirror)
	})
	for _, rec := range recs {
		if rec.Kind == audit.KindHTTP {
			r.egress += rec.BytesDown
		}
	}
	return r
}

// leaseTrail reads the node's trail until done holds for lease's records, for up to 10 s, and
// returns them.
func leaseTrail(tb testing.TB, n *nodeProc, lease string, done func([]audit.Record) bool) []audit.Record {
	tb.Helper()
	var recs []audit.Record
	err := waitUntil(10*time.Second, "the trail to hold the records of "+lease, func() bool {
		recs = recs[:0]
		if err := audit.ReadDir(n.client.Audit, func(r audit.Record) error {
			if r.Lease == lease {
				recs = append(recs, r)
			}
			return nil
		}); err != nil {
			tb.Fatalf("audit trail: %v", err)
		}
		return done(recs)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return recs
}

// leaseReceipt is lease's signed receipt, verified with the node's key.
func leaseReceipt(tb testing.TB, n *nodeProc, c *client.Client, lease string) receipt.Receipt {
	tb.Helper()
	signed, err := c.Receipt(context.Background(), lease)
	if err != nil {
		tb.Fatal(err)
	}
	key, err := os.ReadFile(n.client.AuditKey)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := audit.NewVerifier(string(key))
	if err != nil {
		tb.Fatal(err)
	}
	r, err := receipt.Open(signed, v)
	if err != nil {
		tb.Fatalf("the receipt of %s does not verify: %v\n%s", lease, err, signed)
	}
	return r
}

// TestPipCacheSeedsTheNextInstall: a lease that asks to write pip's cache back leaves it for the
// tenant's next lease of the template, whose install of the same packages fetches no wheel; the
// receipts name what was written and read by the same hash, and a lease with no_caches fetches
// everything again.
func TestPipCacheSeedsTheNextInstall(t *testing.T) {
	m := startPackageMirror(t)
	n := startCacheNode(t, m)
	c := n.goClient()
	wheels := func(answers []string) (n int) {
		for _, a := range answers {
			if strings.HasPrefix(a, "/packages/") && strings.Contains(a, " 200 ") {
				n++
			}
		}
		return n
	}

	first := installRound(t, n, m, apitype.LeaseRequest{WriteCaches: true})
	if got := wheels(first.mirror); got != len(pipPackages) {
		t.Fatalf("the first install fetched %d wheels, want %d: %q", got, len(pipPackages), first.mirror)
	}
	wrote := leaseReceipt(t, n, c, first.lease.ID)
	i := slices.IndexFunc(wrote.Files, func(f receipt.File) bool { return f.Event == string(pool.EventCacheWrite) })
	if i < 0 || wrote.Files[i].Denied || !strings.HasPrefix(wrote.Files[i].SHA256, "sha256:") || wrote.Files[i].Path != "/workspace/.cache/pip" {
		t.Fatalf("the first lease's receipt names no cache written back: %+v", wrote.Files)
	}
	written := wrote.Files[i]

	second := installRound(t, n, m, apitype.LeaseRequest{})
	for i, r := range []pipRound{first, second} {
		t.Logf("install %d: lease %s, install %s, release %s; %d bytes down through the gateway; the mirror answered %q",
			i+1, r.leased.Round(time.Millisecond), r.install.Round(time.Millisecond), r.ended.Round(time.Millisecond), r.egress, r.mirror)
	}
	if got := wheels(second.mirror); got != 0 {
		t.Errorf("the second install fetched %d wheels, want none: %q", got, second.mirror)
	}
	if second.egress*10 > first.egress {
		t.Errorf("the second install brought %d bytes through the gateway, the first %d: want a tenth at most", second.egress, first.egress)
	}
	read := leaseReceipt(t, n, c, second.lease.ID)
	if !slices.ContainsFunc(read.Files, func(f receipt.File) bool {
		return f.Event == string(pool.EventCacheRead) && f.SHA256 == written.SHA256 && !f.Denied
	}) {
		t.Errorf("the second lease's receipt names no read of cache %s: %+v", written.SHA256, read.Files)
	}
	if slices.ContainsFunc(read.Files, func(f receipt.File) bool { return f.Event == string(pool.EventCacheWrite) }) {
		t.Errorf("the second lease, which did not ask, wrote the cache back: %+v", read.Files)
	}

	// A lease that writes back what it was given writes the same archive: the restore keeps
	// what the archive holds (times included), so an untouched cache keeps its hash.
	ctx := context.Background()
	idle, err := c.Lease(ctx, apitype.LeaseRequest{Template: "python", Allow: []string{"@pypi"}, WriteCaches: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, idle.ID); err != nil {
		t.Fatal(err)
	}
	recs := leaseTrail(t, n, idle.ID, func(recs []audit.Record) bool {
		return slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Event == pool.EventCacheWrite })
	})
	if i := slices.IndexFunc(recs, func(r audit.Record) bool { return r.Event == pool.EventCacheWrite }); i < 0 ||
		recs[i].SHA256 != written.SHA256 || !strings.Contains(recs[i].Reason, "(unchanged)") {
		t.Errorf("an untouched cache written back: %+v, want %s unchanged", recs, written.SHA256)
	}

	empty := installRound(t, n, m, apitype.LeaseRequest{NoCaches: true})
	if got := wheels(empty.mirror); got != len(pipPackages) {
		t.Errorf("a lease with no_caches fetched %d wheels, want all %d: %q", got, len(pipPackages), empty.mirror)
	}
}

// BenchmarkPipCache: a second `pip install` of the same packages (12 MiB of wheels, five
// packages) in a lease that starts with the pip cache the first lease wrote back, against the
// first, which starts with it empty: the time of each install, the requests each made, and the
// bytes the gateway recorded coming down for each lease; and what the cache costs, at the lease
// (its restore) and at the first lease's release (its write-back). Over the mirror on loopback,
// and over a link of 10 MiB/s (about 84 Mbit/s), the mirror pacing what it sends.
func BenchmarkPipCache(b *testing.B) {
	m := startPackageMirror(b)
	n := startCacheNode(b, m)
	for _, link := range []struct {
		name string
		rate int64
	}{{"loopback", 0}, {"10MiBps", 10 << 20}} {
		b.Run("link="+link.name, func(b *testing.B) {
			m.rate.Store(link.rate)
			var rounds [2][]pipRound
			for b.Loop() {
				// The first starts empty whatever an earlier round left, and writes back.
				rounds[0] = append(rounds[0], installRound(b, n, m, apitype.LeaseRequest{NoCaches: true, WriteCaches: true}))
				rounds[1] = append(rounds[1], installRound(b, n, m, apitype.LeaseRequest{}))
			}
			for i, name := range []string{"first", "second"} {
				var leased, install, ended time.Duration
				var egress, requests float64
				for _, r := range rounds[i] {
					leased, install, ended = leased+r.leased, install+r.install, ended+r.ended
					egress, requests = egress+float64(r.egress), requests+float64(len(r.mirror))
				}
				k := float64(len(rounds[i]))
				b.ReportMetric(install.Seconds()/k, name+"-install-s")
				b.ReportMetric(egress/k, name+"-egress-B")
				b.ReportMetric(requests/k, name+"-requests")
				b.ReportMetric(leased.Seconds()/k, name+"-lease-s")
				b.ReportMetric(ended.Seconds()/k, name+"-release-s")
			}
		})
	}
}
