package gateway

// Review of a048fe3 (requests held in flight): the window between a request's decision and its
// hold is not "a few instructions, caught on the next tick". admit (forward.go:44) does I/O the
// sandbox controls after deciding (decide, forward.go:87) and before the hold is taken
// (forward.go:49): a SigV4 body read whole (boundSignedBody), a git push's commands (checkGit),
// an MCP message (checkMCP), a reviewer's approval (approve, up to approval.Config.Hold). A swap
// or a release landing in that window is seen by no tick (nothing is held yet), and once the
// hold is taken the request goes upstream at once, with the credential of the scope the lease
// no longer has, and nothing decides it again before it is sent.
//
// Also: a cut landing after relay's record (forward.go:78, relay's p.record at forward.go:434)
// and before the hold's release (forward.go:51) aborts the answer and is recorded as allowed.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/scope"
)

// windowEndings take away what allowed the request while it is between its decision and its hold.
var windowEndings = []struct {
	name string
	end  func(h *harness, keep []scope.Scope)
}{
	{"a swap drops its path", func(h *harness, keep []scope.Scope) { h.setScopes(keep) }},
	{"its lease ends", func(h *harness, _ []scope.Scope) {
		h.mu.Lock()
		h.bindErr = binding.ErrUnknown
		h.mu.Unlock()
	}},
}

// A SigV4 credential that hashes the body makes admit read the whole body before the hold:
// the sandbox sends the head (Expect: 100-continue tells it the decision is made), waits for
// the swap and a tick of the recheck, then sends the body. The request must not go upstream.
func TestHoldWindowSignedBodyOutlivesSwap(t *testing.T) {
	for _, ending := range windowEndings[:1] { // the lease's end closes the session: its own hold
		t.Run(ending.name, func(t *testing.T) {
			h := newHarness(t)
			p := h.proxyHandler()
			p.cfg.Broker = &fakeBroker{get: func(context.Context, string, *broker.Entry) (broker.Secret, error) {
				return broker.Secret{"access_key_id": "AKIDEXAMPLE", "secret_access_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}, nil
			}}
			cat, err := broker.NewCatalog([]broker.Entry{{Name: "aws", Source: broker.Source{Kind: broker.SourceKV, Path: "aws"},
				Inject: broker.Injection{Kind: broker.InjectSigV4, Region: "eu-west-1", Service: "execute-api", MaxBody: 1 << 20},
				Hosts:  []string{"api.example.test"}}})
			if err != nil {
				t.Fatal(err)
			}
			p.Reload(cat, p.dyn.Load().pins, nil, budget.Budget{})
			h.setScopes([]scope.Scope{{Host: "api.example.test", Credential: "aws", Paths: []string{"/prod/*"}}})
			h.answer(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				fmt.Fprintf(w, "signed=%v", r.Header.Get("Authorization") != "")
			})

			tc := h.intercept(t, "api.example.test:443")
			io.WriteString(tc, "POST /prod/items HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
			br := bufio.NewReader(tc)
			cont, err := http.ReadResponse(br, nil)
			if err != nil || cont.StatusCode != http.StatusContinue {
				t.Fatalf("expected 100 Continue once the request is decided and its body read: %v %v", cont, err)
			}
			// Decided; the gateway reads the body, and the request is held by nothing.
			ending.end(h, []scope.Scope{{Host: "api.example.test", Credential: "aws", Paths: []string{"/other/*"}}})
			p.recheck(context.Background()) // a tick lands while the body is on its way
			io.WriteString(tc, "0123456789")
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Errorf("after %s, the request decided before it went upstream with its credential: %d %q", ending.name, resp.StatusCode, body)
				}
			}
			for _, u := range h.received() {
				if strings.HasPrefix(u, "/prod/items") {
					t.Fatalf("after %s, the upstream received %s (sent %v)", ending.name, u, h.received())
				}
			}
		})
	}
}

// A request held for a reviewer is decided before the wait and held by no hold during it: a swap
// (or, where no session holds its connection, the lease's end) while it waits does not stop it
// once a reviewer approves it.
func TestHoldWindowApprovalOutlivesSwap(t *testing.T) {
	approve := scope.Approval{On: true, Methods: []string{"POST"}}
	ways := []struct {
		name   string
		scopes func(path string) []scope.Scope
		post   func(h *harness) heldAnswer
	}{
		{"intercepted", func(path string) []scope.Scope {
			return []scope.Scope{{Host: "api.example.test", Credential: "demo", Paths: []string{path}, Approval: approve}}
		}, func(h *harness) heldAnswer { return heldPost(h, "/v1/deploy") }},
		{"proxy, absolute form", func(path string) []scope.Scope {
			return []scope.Scope{{Host: "plain.example.test", Paths: []string{path}, Approval: approve}}
		}, func(h *harness) heldAnswer {
			resp, err := h.client().Post("http://plain.example.test/v1/deploy", "text/plain", strings.NewReader("deploy"))
			if err != nil {
				return heldAnswer{body: err.Error()}
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return heldAnswer{resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), string(b)}
		}},
	}
	for _, way := range ways {
		for _, ending := range windowEndings {
			if way.name == "intercepted" && ending.name == "its lease ends" {
				continue // the session's own hold is cut: sound
			}
			t.Run(way.name+"/"+ending.name, func(t *testing.T) {
				h := newHarness(t)
				h.setScopes(way.scopes("/v1/*"))
				ap := approval.New(approval.Config{Hold: 10 * time.Second, Audit: h.sink, Node: "n"})
				p := h.proxyHandler()
				p.cfg.Approvals = ap
				var wg sync.WaitGroup
				var got heldAnswer
				wg.Add(1)
				go func() { defer wg.Done(); got = way.post(h) }()
				a := pendingOne(t, ap, 1)
				ending.end(h, way.scopes("/v1/read"))
				p.recheck(context.Background()) // a tick while it waits: nothing holds it
				if _, err := ap.Answer(a.ID, "secops", true, false, ""); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				if got.status == http.StatusOK {
					t.Errorf("after %s, the approved request went upstream under what its lease no longer allows: %+v", ending.name, got)
				}
				for _, u := range h.received() {
					if strings.HasPrefix(u, "/v1/deploy") {
						t.Fatalf("after %s, the upstream received %s", ending.name, u)
					}
				}
			})
		}
	}
}

// hookSink runs hook on each record before keeping it: the test's way of landing the recheck's
// tick at an exact point of a request.
type hookSink struct {
	*memSink
	hook func(audit.Record)
}

func (s *hookSink) Write(ctx context.Context, r audit.Record) error {
	if s.hook != nil {
		s.hook(r)
	}
	return s.memSink.Write(ctx, r)
}

// A cut that lands after the request's record is written (relay records, then forward's
// deferred release sees the cut and aborts) is not recorded: the trail says the answer was
// allowed and delivered, the sandbox got an aborted connection, and no record says why.
func TestHoldCutAfterRecordIsRecorded(t *testing.T) {
	h := newHarness(t)
	p := h.proxyHandler()
	var once sync.Once
	p.cfg.Audit = &hookSink{memSink: h.sink, hook: func(r audit.Record) {
		if r.Kind == audit.KindHTTP && r.Path == "/v1/x" {
			once.Do(func() {
				h.setScopes([]scope.Scope{{Host: "api.example.test", Credential: "demo", Paths: []string{"/v1/other"}}})
				p.recheck(context.Background()) // the tick lands between the record and the release
			})
		}
	}}
	resp, err := h.client().Get("https://api.example.test/v1/x")
	complete := false
	if err == nil {
		_, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		complete = rerr == nil && resp.StatusCode == http.StatusOK
	}
	rec, ok := h.sink.await(func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Path == "/v1/x" })
	if !ok {
		t.Fatal("no record of the request")
	}
	if !complete && rec.Decision == audit.Allow {
		t.Fatalf("the sandbox's answer was cut (%v), yet the only record says %s %q: the cut is recorded nowhere", err, rec.Decision, rec.Reason)
	}
	if complete && rec.Decision == audit.Deny {
		t.Fatalf("the answer was delivered whole, yet recorded as cut: %+v", rec)
	}
}
