package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlock-dev/airlock/client"
)

// An id or a process id shaped like a path or a query reaches the endpoint it was given for,
// as one segment: it names no other lease or endpoint and adds no query.
func TestIDsStayOneSegment(t *testing.T) {
	type seen struct{ route, id, pid, query string }
	var got []seen
	mux := http.NewServeMux()
	record := func(route string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			got = append(got, seen{route, r.PathValue("id"), r.PathValue("pid"), r.URL.RawQuery})
			w.WriteHeader(http.StatusNoContent)
		}
	}
	mux.HandleFunc("GET /v1/leases/{id}", record("lease"))
	mux.HandleFunc("POST /v1/leases/{id}/processes/{pid}/signal", record("signal"))
	mux.HandleFunc("POST /v1/leases/{id}/processes/{pid}/stdin", record("stdin"))
	mux.HandleFunc("/", record("elsewhere"))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &client.Client{Addr: srv.URL}
	ctx := context.Background()

	const id, pid = "l-1/../../keys", "p-1?pid=p-2#x"
	c.Get(ctx, "../keys?all=1")
	c.SignalProcess(ctx, id, pid, "KILL")
	c.SendInput(ctx, id, "../../signal", []byte("x"))
	want := []seen{{"lease", "../keys?all=1", "", ""}, {"signal", id, pid, ""}, {"stdin", id, "../../signal", ""}}
	if len(got) != len(want) {
		t.Fatalf("the server saw %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d reached %+v, want %+v", i, got[i], want[i])
		}
	}
}
