package approval

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

type sink struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (s *sink) Write(_ context.Context, r audit.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
	return nil
}

// An approval no one answers expires, recorded; a grant for the lease ends with the lease.
func TestExpiry(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := &sink{}
	reg := New(Config{Hold: time.Millisecond, TTL: time.Minute, Audit: s, Now: clock})
	req := Request{Lease: "l-1", Tenant: "acme", Method: "POST", Host: "deploy.example", Port: 443, Path: "/deploy", LeaseEnd: now.Add(time.Hour)}
	o := reg.Wait(context.Background(), req)
	if o.Approved || o.Denied || o.Pending.ID == "" {
		t.Fatalf("an unanswered request: %+v", o)
	}
	advance(2 * time.Minute)
	if got := reg.List(func(string) bool { return true }); len(got) != 0 {
		t.Fatalf("an approval outlived its ttl: %+v", got)
	}
	if _, err := reg.Answer(o.Pending.ID, "secops", true, true, ""); err == nil {
		t.Fatal("an expired approval was answered")
	}
	o = reg.Wait(context.Background(), req)
	reg.Answer(o.Pending.ID, "secops", true, true, "")
	if o := reg.Wait(context.Background(), req); !o.Approved {
		t.Fatal("a lease grant did not cover the identical request")
	}
	advance(2 * time.Hour) // the lease has ended
	if o := reg.Wait(context.Background(), req); o.Approved {
		t.Fatal("a lease grant outlived the lease")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	expired := false
	for _, r := range s.recs {
		expired = expired || r.Event == "approval-expire"
	}
	if !expired {
		t.Error("the expiry was not recorded")
	}
	// Another tenant's approvals are not listed to a caller who cannot see them.
	if got := reg.List(func(t string) bool { return t == "globex" }); len(got) != 0 {
		t.Errorf("listed to another tenant: %+v", got)
	}
}

// The webhook is told of each new approval, as JSON.
func TestWebhook(t *testing.T) {
	got := make(chan map[string]any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		json.NewDecoder(r.Body).Decode(&v)
		got <- v
	}))
	defer srv.Close()
	reg := New(Config{Hold: time.Millisecond, Node: "n1",
		Notify: Webhook(srv.URL, "n1", srv.Client(), slog.New(slog.NewTextHandler(io.Discard, nil)))})
	o := reg.Wait(context.Background(), Request{Lease: "l-1", Tenant: "acme", Method: "POST", Host: "deploy.example", Port: 443, Path: "/deploy"})
	select {
	case v := <-got:
		ap, _ := v["approval"].(map[string]any)
		if v["event"] != "approval-request" || v["node"] != "n1" || ap["id"] != o.Pending.ID {
			t.Fatalf("webhook got %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook was not called within 10s")
	}
}
