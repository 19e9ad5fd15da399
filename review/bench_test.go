package review

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// The big trail: AIRLOCK_REVIEW_BENCH_RECORDS records (default one million; the closing numbers
// use ten million) over one day, of 1,000 leases of 10 tenants, 25 running at a time, each with
// a bind, its traffic (requests to 50 hosts, one in ten a DNS question, one in a hundred a
// denial, one in a thousand a command) and a release, in 64 MiB segments.
const (
	benchLeases     = 1000
	benchConcurrent = 25
)

var (
	benchOnce sync.Once
	benchDir  string
	benchDay  = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
)

func benchLease(l int) string { return fmt.Sprintf("l-%06d", l) }

func bigTrail(b *testing.B) (string, int) {
	n := 1_000_000
	if v := os.Getenv("AIRLOCK_REVIEW_BENCH_RECORDS"); v != "" {
		fmt.Sscan(v, &n)
	}
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-review-bench-")
		if err != nil {
			b.Fatal(err)
		}
		s, err := audit.OpenFile(audit.FileConfig{Dir: dir, Node: "bench", Queue: 1 << 16, FlushEvery: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		per := n / benchLeases // records per lease
		block := per * benchConcurrent
		step := 24 * time.Hour / time.Duration(n)
		write := func(r audit.Record) {
			for s.Write(ctx, r) != nil {
				s.Flush(ctx)
			}
		}
		for i := range n {
			l := i/block*benchConcurrent + i%benchConcurrent
			r := audit.Record{Time: benchDay.Add(time.Duration(i) * step), Node: "bench", Tenant: fmt.Sprintf("tenant-%02d", l%10),
				Lease: benchLease(l), Task: fmt.Sprintf("task-%06d", l), Source: "10.0.0.2"}
			j := i % block / benchConcurrent // the lease's own record number
			switch in := i % block; {
			case in < benchConcurrent:
				r.Kind, r.Event, r.Template, r.Runtime, r.Scopes = audit.KindLease, "bind", "default", "runc", []string{"h1.example"}
			case in >= block-benchConcurrent:
				r.Kind, r.Event = audit.KindLease, "release"
			case j%1000 == 500:
				code := 0
				r.Kind, r.Command, r.ExitCode = audit.KindExec, []string{"make", "test"}, &code
			case j%100 == 50:
				r.Kind, r.Decision, r.Rule, r.Method, r.Host, r.Port, r.Path, r.Status = audit.KindHTTP, audit.Deny, "scope-miss", "POST",
					"evil.example", 443, "/upload", 403
				r.Reason = "no scope allowing POST evil.example:443/upload"
			case j%10 == 5:
				r.Kind, r.Decision, r.Rule, r.QName, r.QType, r.Answers = audit.KindDNS, audit.Allow, "scope", fmt.Sprintf("h%d.example.", i%50), "A", 1
			default:
				r.Kind, r.Decision, r.Rule, r.Reason, r.Method, r.Host, r.Port, r.Path, r.Status = audit.KindHTTP, audit.Allow, "scope",
					"scope h.example", "GET", fmt.Sprintf("h%d.example", i%50), 443, "/pkg", 200
				r.BytesUp, r.BytesDown, r.Credential = 300, 40000, "registry"
			}
			write(r)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		benchDir = dir
	})
	return benchDir, n
}

// benchServer opens the big trail as a node does and returns the page signed in as a reviewer
// of every tenant.
func benchServer(b *testing.B) (*Server, *http.Cookie, int) {
	dir, n := bigTrail(b)
	sink, err := audit.OpenFile(audit.FileConfig{Dir: dir, Node: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sink.Close() })
	s, err := New(Config{Trail: sink, Sink: sink, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	c := &http.Cookie{Name: s.cookieName(), Value: s.sessions.start(&session{Who: "bench", Reviewer: true, All: true})}
	return s, c, n
}

func benchPage(b *testing.B, s *Server, c *http.Cookie, url, want string) {
	b.Helper()
	req := httptest.NewRequest(http.MethodGet, url, nil)
	req.AddCookie(c)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), want) {
		b.Fatalf("%s: %d, lacks %q: %s", url, w.Code, want, w.Body.String())
	}
}

var dayRange = "since=" + benchDay.Format(time.RFC3339) + "&until=" + benchDay.Add(24*time.Hour).Format(time.RFC3339)

// BenchmarkOverviewDay renders the overview of the whole day: its 1,000 leases (the page lists
// the 500 most recently active), from the segments' lease tallies.
func BenchmarkOverviewDay(b *testing.B) {
	s, c, n := benchServer(b)
	for b.Loop() {
		benchPage(b, s, c, "/?"+dayRange, "<b>1000</b> leases") // all counted; 500 listed
	}
	b.ReportMetric(float64(n), "records")
}

// BenchmarkOverviewFiltered is the overview of the day's leases of one tenant that sent something
// denied to one host.
func BenchmarkOverviewFiltered(b *testing.B) {
	s, c, _ := benchServer(b)
	for b.Loop() {
		benchPage(b, s, c, "/?"+dayRange+"&tenant=tenant-03&decision=deny&host=evil.example", "<b>100</b> leases")
	}
}

// BenchmarkLedgerPage renders the first page (500 records) of one lease's ledger.
func BenchmarkLedgerPage(b *testing.B) {
	s, c, _ := benchServer(b)
	for b.Loop() {
		benchPage(b, s, c, "/leases/"+benchLease(benchLeases/2)+"?"+dayRange, "Next page")
	}
}

// BenchmarkDenialsOfLease groups one lease's denials (one in a hundred of its records).
func BenchmarkDenialsOfLease(b *testing.B) {
	s, c, _ := benchServer(b)
	for b.Loop() {
		benchPage(b, s, c, "/denials?"+dayRange+"&lease="+benchLease(benchLeases/2), "scope-miss")
	}
}

// BenchmarkOpenBigTrail is what a node's start spends on the big trail: every sealed segment's
// index read, its value counts and lease tallies kept in memory.
func BenchmarkOpenBigTrail(b *testing.B) {
	dir, _ := bigTrail(b)
	for b.Loop() {
		sink, err := audit.OpenFile(audit.FileConfig{Dir: dir, Node: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		sink.Close()
	}
}

// TestMain removes the benchmarks' trail.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}
