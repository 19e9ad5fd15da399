package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

func TestAPI(t *testing.T) {
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 3, MaxTotal: 10}}})
	iss, m := e.Issuer, e.Manager
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(api.New(api.Config{Pool: m, Logger: quiet, RatePerKey: 5, BurstPerKey: 20,
		Keys: map[string]string{api.HashKey("key-acme"): "acme", api.HashKey("key-globex"): "globex"}}))
	defer srv.Close()
	e.MustWarm(t, 3)

	call := func(key, method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	errCode := func(out map[string]any) string {
		e, _ := out["error"].(map[string]any)
		c, _ := e["code"].(string)
		return c
	}

	if st, out := call("", "GET", "/v1/leases", ""); st != 401 || errCode(out) != "unauthorized" {
		t.Fatalf("no key: %d %v", st, out)
	}
	if st, out := call("wrong", "GET", "/v1/pools", ""); st != 401 || errCode(out) != "unauthorized" {
		t.Fatalf("wrong key: %d %v", st, out)
	}
	if st, out := call("key-acme", "POST", "/v1/leases", `{"template": "default", "tokn": "x"}`); st != 400 || !strings.Contains(fmt.Sprint(out), "tokn") {
		t.Fatalf("unknown field: %d %v", st, out)
	}
	tok, _ := iss.Mint("task-1", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	if st, out := call("key-acme", "POST", "/v1/leases", `{"template": "nope", "token": "`+tok+`"}`); st != 404 || errCode(out) != "unknown_template" {
		t.Fatalf("unknown template: %d %v", st, out)
	}
	st, lease := call("key-acme", "POST", "/v1/leases", `{"template": "default", "token": "`+tok+`"}`)
	if st != 201 || lease["start"] != "warm" {
		t.Fatalf("lease: %d %v", st, lease)
	}
	id := lease["id"].(string)
	if _, has := lease["token"]; has {
		t.Fatal("the API returned the task token")
	}
	// Another tenant's key neither sees nor releases it.
	if st, out := call("key-globex", "GET", "/v1/leases/"+id, ""); st != 404 || errCode(out) != "lease_not_found" {
		t.Fatalf("other tenant GET: %d %v", st, out)
	}
	if st, _ := call("key-globex", "DELETE", "/v1/leases/"+id, ""); st != 404 {
		t.Fatalf("other tenant DELETE: %d", st)
	}
	// Nor anything the workbench does in it: files, processes, terminals, explanations.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/leases/" + id + "/fs/list?path=", ""},
		{"GET", "/v1/leases/" + id + "/fs/stat?path=x", ""},
		{"POST", "/v1/leases/" + id + "/fs/mkdir", `{"path": "x"}`},
		{"POST", "/v1/leases/" + id + "/fs/remove", `{"path": "x"}`},
		{"POST", "/v1/leases/" + id + "/fs/move", `{"from": "x", "to": "y"}`},
		{"POST", "/v1/leases/" + id + "/processes", `{"cmd": ["true"]}`},
		{"GET", "/v1/leases/" + id + "/processes", ""},
		{"GET", "/v1/leases/" + id + "/processes/p-1/output", ""},
		{"GET", "/v1/leases/" + id + "/processes/p-1/wait", ""},
		{"POST", "/v1/leases/" + id + "/processes/p-1/signal", `{"signal": "KILL"}`},
		{"POST", "/v1/leases/" + id + "/exec", `{"cmd": ["true"]}`},
		{"POST", "/v1/explain", `{"lease": "` + id + `", "url": "https://a.example/"}`},
	} {
		if st, out := call("key-globex", c.method, c.path, c.body); st != 404 || errCode(out) != "lease_not_found" {
			t.Errorf("other tenant %s %s: %d %v", c.method, c.path, st, out)
		}
	}
	if st, out := call("key-acme", "GET", "/v1/leases/"+id+"/processes", ""); st != 200 {
		t.Errorf("own process list: %d %v", st, out)
	}
	if st, _ := call("key-acme", "DELETE", "/v1/leases/"+id, ""); st != 204 {
		t.Fatalf("own DELETE: %d", st)
	}
	// Per-key rate limit: the burst passes, then 429; another key is unaffected.
	limited := 0
	for range 40 {
		if st, out := call("key-acme", "GET", "/v1/pools", ""); st == 429 {
			limited++
			if errCode(out) != "rate_limited" {
				t.Fatalf("429 body %v", out)
			}
		}
	}
	if limited == 0 {
		t.Fatal("40 requests at once were never limited")
	}
	if st, _ := call("key-globex", "GET", "/v1/pools", ""); st != 200 {
		t.Fatalf("other key limited: %d", st)
	}
}
