package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A tenant's route mounted without auth is refused, with a 500 that says so, and its handler
// never runs: it is not served for an empty tenant, and nothing panics.
func TestRouteWithoutAuthIsRefused(t *testing.T) {
	s := New(Config{Keys: map[string]string{HashKey("k"): "acme"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var served []string
	record := func(w http.ResponseWriter, r *http.Request, tenant string) {
		served = append(served, tenant)
		w.WriteHeader(http.StatusNoContent)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/leases", s.tenanted(s.listLeases)) // the pool is nil: reaching it would panic
	mux.HandleFunc("GET /bare", s.tenanted(record))
	mux.HandleFunc("GET /authed", s.auth(call, s.tenanted(record)))

	for _, path := range []string{"/v1/leases", "/bare"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != http.StatusInternalServerError || body.Error.Code != "unauthenticated_route" ||
			!strings.Contains(body.Error.Message, "GET "+path+" is served without authentication") {
			t.Errorf("GET %s without auth: %d %s", path, rec.Code, rec.Body)
		}
	}
	if len(served) != 0 {
		t.Errorf("a handler ran without auth, for tenants %q", served)
	}

	// Behind auth the same handler is served for the key's tenant.
	req := httptest.NewRequest(http.MethodGet, "/authed", nil)
	req.Header.Set("Authorization", "Bearer k")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent || len(served) != 1 || served[0] != "acme" {
		t.Errorf("behind auth: %d, served for %q", rec.Code, served)
	}
}
