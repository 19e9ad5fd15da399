package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/api"
	"github.com/airlock-dev/airlock/pool/pooltest"
)

// A record holding bytes that are not UTF-8 (a sandbox asked for /%ff) and a line that fails
// verification do not stop GET /v1/audit: every record that verifies is served, the bytes read
// back exactly, and the bad line is reported by position.
func TestAuditServesAroundBadLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := audit.OpenFile(audit.FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sink.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Path: "/\xff\x1b[2J"})
	sink.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Path: "/tampered", Decision: audit.Deny})
	sink.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Path: "/after"})
	sink.Close()
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), `"decision":"deny"`, `"decision":"allow"`, 1)), 0o600)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, _ := pool.New(pool.Config{Node: "n1", Runtime: &pooltest.Runtime{}, Audit: audit.Discard{}, Logger: quiet})
	srv := httptest.NewServer(api.New(api.Config{Pool: m, Logger: quiet, AuditPath: path,
		Keys: map[string]string{api.HashKey("key-acme"): "acme"}}))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/audit", nil)
	req.Header.Set("Authorization", "Bearer key-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/audit on a trail with a bad line: %d", resp.StatusCode)
	}
	if p := resp.Header.Get(api.AuditProblemsHeader); !strings.Contains(p, "line 2") || !strings.Contains(p, "edited") {
		t.Fatalf("problems header %q does not name line 2", p)
	}
	var recs []audit.Record
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].Path != "/after" {
		t.Fatalf("served %d records: %+v", len(recs), recs)
	}
	// JSON carries the text with U+FFFD and the exact bytes beside it.
	if raw, _ := base64.StdEncoding.DecodeString(recs[0].Raw["path"]); string(raw) != "/\xff\x1b[2J" {
		t.Fatalf("the record's exact path bytes are not in the answer: %+v", recs[0])
	}
}
