package gateway

// What happens between a decision and its hold is decided again once the hold is taken
// (redecide), as the recheck would decide it; and a cut is recorded as one (audit.EventCut),
// its status what the sandbox was sent, and the scope its credential went upstream under.

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// A swap that lands while a request waits for its reviewer, with no tick of the recheck after
// it, is seen when the request is decided again before it is sent: the sandbox is refused as a
// new request would be, by the recheck's rule, and the record says it was cut at its decision.
func TestRedecideRefusesWhatTheWaitLost(t *testing.T) {
	approve := scope.Approval{On: true, Methods: []string{"POST"}}
	for _, tc := range []struct {
		name  string
		after []scope.Scope
		rule  rule.Rule
	}{
		{"its path dropped", []scope.Scope{{Host: "api.example.test", Credential: "demo", Paths: []string{"/v1/read"}, Approval: approve}}, rule.ScopeMiss},
		// The path stays allowed, by a scope that no longer injects the credential the request
		// was decided to carry: it must not go upstream with it.
		{"its credential taken away", []scope.Scope{{Host: "api.example.test", Paths: []string{"/v1/*"}, Approval: approve}}, rule.ScopeMiss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.setScopes([]scope.Scope{{Host: "api.example.test", Credential: "demo", Paths: []string{"/v1/*"}, Approval: approve}})
			ap := approval.New(approval.Config{Hold: 10 * time.Second, Audit: h.sink, Node: "n"})
			p := h.proxyHandler()
			p.cfg.Approvals = ap
			var wg sync.WaitGroup
			var got heldAnswer
			wg.Add(1)
			go func() { defer wg.Done(); got = heldPost(h, "/v1/deploy") }()
			a := pendingOne(t, ap, 1)
			h.setScopes(tc.after) // no recheck runs: only the request's own decision can see it
			if _, err := ap.Answer(a.ID, "secops", true, false, ""); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if got.status != http.StatusForbidden || rule.Rule(got.rule) != tc.rule || !strings.Contains(got.body, "cut by the recheck: ") {
				t.Fatalf("the approved request after the swap: %+v, want 403 %s from the recheck's decision", got, tc.rule)
			}
			if u := h.received(); len(u) != 0 {
				t.Fatalf("the upstream received %v", u)
			}
			rec, ok := h.sink.await(func(r audit.Record) bool {
				return r.Kind == audit.KindHTTP && r.Path == "/v1/deploy" && r.Decision != ""
			})
			if !ok || rec.Decision != audit.Deny || rec.Event != audit.EventCut || rec.Rule != tc.rule || rec.Status != http.StatusForbidden ||
				len(rec.Scopes) != 0 || !strings.HasPrefix(rec.Reason, "cut by the recheck: ") {
				t.Fatalf("the request's record: %+v", rec)
			}
		})
	}
}

// A cut while a request waits for its reviewer ends the wait, and its record's status is the
// cut's, as a request sent after it is refused: not the pending approval's 403 under the cut's
// rule.
func TestCutRecordStatusIsTheCuts(t *testing.T) {
	approve := scope.Approval{On: true, Methods: []string{"POST"}}
	h := newHarness(t)
	h.setScopes([]scope.Scope{{Host: "plain.example.test", Paths: []string{"/v1/*"}, Approval: approve}})
	ap := approval.New(approval.Config{Hold: 10 * time.Second, Audit: h.sink, Node: "n"})
	p := h.proxyHandler()
	p.cfg.Approvals = ap
	done := make(chan error, 1)
	go func() {
		resp, err := h.client().Post("http://plain.example.test/v1/deploy", "text/plain", strings.NewReader("deploy"))
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	pendingOne(t, ap, 1)
	h.mu.Lock()
	h.bindErr = binding.ErrUnknown
	h.mu.Unlock()
	p.recheck(context.Background())
	receive(t, done, "the held request to end once cut")
	rec, ok := h.sink.await(func(r audit.Record) bool {
		return r.Kind == audit.KindHTTP && r.Path == "/v1/deploy" && r.Decision != ""
	})
	if !ok || rec.Event != audit.EventCut || !strings.HasPrefix(rec.Reason, "cut by the recheck: ") {
		t.Fatalf("the cut request's record: %+v", rec)
	}
	resp, err := h.client().Get("http://plain.example.test/v1/after")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if rec.Status != resp.StatusCode || string(rec.Rule) != resp.Header.Get("X-Airlock-Rule") {
		t.Fatalf("the cut is recorded as %d %s; a request after it is refused %d %s", rec.Status, rec.Rule,
			resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
	}
}

// A request cut after it went upstream is recorded with the credential it carried and the
// scope it was sent under, for the receipt; its status is the head the sandbox was sent.
func TestCutAfterSendingNamesItsScope(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Trailer", "X-Done") // the gateway sends the head at once: the sandbox sees 200
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	tc := h.intercept(t, "api.example.test:443")
	io.WriteString(tc, "GET /v1/slow HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the answer's head: %v %v", resp, err)
	}
	h.setScopes([]scope.Scope{{Host: "api.example.test", Credential: "demo", Paths: []string{"/v1/other"}}})
	h.proxyHandler().recheck(context.Background())
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("the cut answer ended as if whole")
	}
	rec, ok := h.sink.await(func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Path == "/v1/slow" })
	want := []string{scope.Scope{Host: "api.example.test", Credential: "demo", Methods: []string{"GET", "POST"}, Paths: []string{"/v1/*", "/echo"}}.String()}
	if !ok || rec.Event != audit.EventCut || rec.Decision != audit.Deny || rec.Rule != rule.ScopeMiss || rec.Status != http.StatusOK ||
		rec.Credential != "demo" || len(rec.Scopes) != 1 || rec.Scopes[0] != want[0] {
		t.Fatalf("the cut request's record: %+v, want scopes %q", rec, want)
	}
}

// dialFunc is a ContextDialer of one function.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (f dialFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

var _ ContextDialer = dialFunc(nil)

// A tunnel is decided again once held, after its lookup and dial: a swap that lands during the
// dial refuses the CONNECT, as the recheck would, before a byte of the sandbox's goes through.
func TestRedecideTunnelAfterItsDial(t *testing.T) {
	h := newHarness(t)
	h.setScopes([]scope.Scope{{Host: "git.example.test", Ports: []int{22}, Tunnel: true}})
	h.pinEcho(t, "git.example.test:22")
	p := h.proxyHandler()
	p.cfg.Dialer = dialFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.setScopes([]scope.Scope{{Host: "git.example.test", Ports: []int{2222}, Tunnel: true}}) // lands during the dial
		return h.dialer.DialContext(ctx, network, addr)
	})
	c := dialTimed(t, h.proxy.Listener.Addr().String())
	io.WriteString(c, "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusForbidden || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.ScopeMiss {
		t.Fatalf("CONNECT after a swap during its dial: %v %v", resp, err)
	}
	rec, ok := h.sink.await(func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Host == "git.example.test" })
	if !ok || rec.Decision != audit.Deny || rec.Event != audit.EventCut || !strings.HasPrefix(rec.Reason, "cut by the recheck: ") {
		t.Fatalf("the tunnel's record: %+v", rec)
	}
	if p.held.leases()["l-1"] {
		t.Fatal("the refused tunnel is still held")
	}
}
