package api_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/receipt"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
)

func auditServer(t *testing.T, sink *audit.FileSink, signer ...note.Signer) *httptest.Server {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, _ := pool.New(pool.Config{Node: "n1", Runtime: &pooltest.Runtime{}, Audit: audit.Discard{}, Logger: quiet})
	cfg := api.Config{Pool: m, Logger: quiet, Audit: sink,
		Keys: map[string]string{api.HashKey("key-acme"): "acme", api.HashKey("key-globex"): "globex"}}
	if len(signer) > 0 {
		cfg.Receipt = func(ctx context.Context, tenant, lease string) ([]byte, error) {
			return receipt.Make(ctx, sink, signer[0], tenant, lease)
		}
	}
	srv := httptest.NewServer(api.New(cfg))
	t.Cleanup(srv.Close)
	return srv
}

func getAudit(t *testing.T, srv *httptest.Server, key, query string) (int, client.AuditPage) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/audit?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page client.AuditPage
	if resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			t.Fatalf("GET /v1/audit?%s: the answer is not a page: %v", query, err)
		}
	}
	return resp.StatusCode, page
}

// A record holding bytes that are not UTF-8 (a sandbox asked for /%ff) and a line that fails
// its own check do not stop GET /v1/audit: every record that verifies is served, the bytes read
// back exactly, and the bad line is reported by position.
func TestAuditServesAroundBadLines(t *testing.T) {
	dir := t.TempDir()
	sink, err := audit.OpenFile(audit.FileConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sink.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Path: "/\xff\x1b[2J"})
	sink.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Path: "/tampered", Decision: audit.Deny})
	sink.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Path: "/after"})
	sink.Close()
	seg := filepath.Join(dir, "00000000000000000001.jsonl")
	b, _ := os.ReadFile(seg)
	os.WriteFile(seg, []byte(strings.Replace(string(b), `"decision":"deny"`, `"decision":"allow"`, 1)), 0o600)
	sink, err = audit.OpenFile(audit.FileConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	srv := auditServer(t, sink)
	status, page := getAudit(t, srv, "key-acme", "")
	if status != 200 {
		t.Fatalf("GET /v1/audit on a trail with a bad line: %d", status)
	}
	if len(page.Problems) != 1 || page.Problems[0].Line != 3 || !strings.Contains(page.Problems[0].Reason, "edited") {
		t.Fatalf("problems %+v do not name line 3", page.Problems)
	}
	recs := page.Records
	if len(recs) != 2 || recs[1].Path != "/after" {
		t.Fatalf("served %d records: %+v", len(recs), recs)
	}
	// JSON carries the text with U+FFFD and the exact bytes beside it.
	if raw, _ := base64.StdEncoding.DecodeString(recs[0].Raw["path"]); string(raw) != "/\xff\x1b[2J" {
		t.Fatalf("the record's exact path bytes are not in the answer: %+v", recs[0])
	}
}

// The filters combine on the server, pages follow the cursor, a tenant never sees another's
// records whatever it asks, and a malformed filter is refused by name.
func TestAuditFiltersPagesAndTenants(t *testing.T) {
	sink, err := audit.OpenFile(audit.FileConfig{Dir: t.TempDir(), SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	ctx := context.Background()
	for i := range 600 {
		tenant := []string{"acme", "globex"}[i%2]
		d := audit.Allow
		if i%3 == 0 {
			d = audit.Deny
		}
		sink.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: tenant, Lease: fmt.Sprint("l", i%4), Decision: d,
			Rule: "scope", Host: fmt.Sprintf("h%d.example", i%5), Path: fmt.Sprint("/", i)})
	}
	srv := auditServer(t, sink)
	_, all := getAudit(t, srv, "key-acme", "limit=10000")
	if len(all.Records) != 300 || all.More {
		t.Fatalf("acme has %d records (more %v), want 300", len(all.Records), all.More)
	}
	for _, r := range all.Records {
		if r.Tenant != "acme" {
			t.Fatalf("acme was served a record of %q", r.Tenant)
		}
	}
	// Asking for another tenant's lease, or naming a tenant, changes nothing.
	if _, p := getAudit(t, srv, "key-acme", "lease=l1&tenant=globex"); len(p.Records) != 0 {
		t.Fatalf("acme asking for globex's lease l1 got %d records", len(p.Records))
	}
	_, p := getAudit(t, srv, "key-acme", "lease=l2&decision=deny&host=H0.EXAMPLE")
	want := 0
	for i := 0; i < 600; i += 2 {
		if i%4 == 2 && i%3 == 0 && i%5 == 0 {
			want++
		}
	}
	if len(p.Records) != want || want == 0 {
		t.Fatalf("lease=l2&decision=deny&host=h0: %d records, want %d", len(p.Records), want)
	}
	var paged []audit.Record
	after := uint64(0)
	for range 100 {
		_, p := getAudit(t, srv, "key-acme", fmt.Sprintf("limit=64&after=%d", after))
		paged = append(paged, p.Records...)
		if !p.More {
			break
		}
		after = p.Next
	}
	if len(paged) != 300 || paged[299].Seq != all.Records[299].Seq {
		t.Fatalf("pages of 64 gave %d records", len(paged))
	}
	for _, bad := range []string{"decision=maybe", "kind=ftp", "flagged=yes", "since=yesterday", "after=-1", "limit=0", "limit=10001"} {
		if status, _ := getAudit(t, srv, "key-acme", bad); status != http.StatusBadRequest {
			t.Errorf("GET /v1/audit?%s: %d, want 400", bad, status)
		}
	}
}

// A lease's receipt is served to its tenant, signed, after the lease is gone; another tenant
// asking for the same id is told there is none.
func TestReceiptByTenant(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, audit.KeyName("n1"))
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	sink, err := audit.OpenFile(audit.FileConfig{Dir: t.TempDir(), Node: "n1", Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	ctx := context.Background()
	sink.Write(ctx, audit.Record{Kind: audit.KindLease, Event: "bind", Tenant: "acme", Lease: "l-1", Node: "n1"})
	sink.Write(ctx, audit.Record{Kind: audit.KindLease, Event: "release", Tenant: "acme", Lease: "l-1", Node: "n1"})
	srv := auditServer(t, sink, signer)
	get := func(key string) (int, []byte) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/leases/l-1/receipt", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	st, body := get("key-acme")
	if st != 200 {
		t.Fatalf("own receipt: %d %s", st, body)
	}
	if r, err := receipt.Open(body, verifier); err != nil || r.EndedBy != "release" {
		t.Fatalf("the receipt served: %v %+v", err, r)
	}
	if st, body := get("key-globex"); st != 404 || strings.Contains(string(body), "acme") {
		t.Fatalf("another tenant's receipt: %d %s", st, body)
	}
}
