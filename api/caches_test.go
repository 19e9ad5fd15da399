package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// bindSink keeps the reasons of the bind records written to it, by lease.
type bindSink struct {
	mu    sync.Mutex
	binds map[string]string
}

func (s *bindSink) Write(_ context.Context, r audit.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Event == audit.EventBind {
		s.binds[r.Lease] = r.Reason
	}
	return nil
}

func (s *bindSink) reason(lease string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.binds[lease]
}

// TestLeaseCacheFlags: POST /v1/leases hands no_caches and write_caches to the pool: a lease
// asking to write back the caches of a template that keeps none is refused saying so, on a node
// that keeps no store it is refused for that, and one asking for no caches starts with them
// empty.
func TestLeaseCacheFlags(t *testing.T) {
	sink := &bindSink{binds: map[string]string{}}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{
		{Name: "default", MinWarm: 1, MaxTotal: 4},
		{Name: "python", MinWarm: 1, MaxTotal: 4, Caches: []pool.Cache{{Name: "pip", Path: "~/.cache/pip", MaxMB: 8}}},
	}, Pool: func(c *pool.Config) { c.Audit = sink }})
	srv := httptest.NewServer(api.New(api.Config{Pool: e.Manager, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Keys: map[string]string{api.HashKey("key-acme"): "acme"}}))
	defer srv.Close()
	e.MustWarm(t, 1)
	lease := func(body string) (int, map[string]any) {
		t.Helper()
		tok, _ := e.Issuer.Mint("task-"+time.Now().Format("150405.000000000"), "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
		req, _ := http.NewRequest("POST", srv.URL+"/v1/leases", strings.NewReader(strings.Replace(body, "TOKEN", tok, 1)))
		req.Header.Set("Authorization", "Bearer key-acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}

	if st, out := lease(`{"template": "default", "token": "TOKEN", "write_caches": true}`); st != 400 || !strings.Contains(fmt.Sprint(out), "declares no cache kept per tenant") {
		t.Errorf("write_caches on a template without caches: %d %v", st, out)
	}
	if st, out := lease(`{"template": "python", "token": "TOKEN", "write_caches": true}`); st != 501 {
		t.Errorf("write_caches on a node that keeps no store: %d %v", st, out)
	}
	st, out := lease(`{"template": "python", "token": "TOKEN", "no_caches": true}`)
	if st != 201 {
		t.Fatalf("a lease with no_caches: %d %v", st, out)
	}
	if r := sink.reason(out["id"].(string)); !strings.Contains(r, "cache pip left empty (no_caches)") {
		t.Errorf("the lease with no_caches was bound with %q", r)
	}
}
