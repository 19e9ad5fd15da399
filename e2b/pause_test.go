package e2b_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/e2b"
	"github.com/airlock-dev/airlock/pool"
)

// pauseAPI is the node's API as far as pause and resume go, answering as the real one does
// (the pool's tests cover what a pause keeps): leases by id with their state; a pause keeps the
// files, and says why not memory when asked; a resume takes only goodToken, for the lease's
// task. The lease noStore is on a node that keeps no snapshots. It records each call.
type pauseAPI struct {
	mu     sync.Mutex
	leases map[string]apitype.LeaseView
	calls  []string
}

const (
	leaseA    = "l-aaaaaaaaaaaaaaaaaaaaaaaa"
	leaseB    = "l-bbbbbbbbbbbbbbbbbbbbbbbb"
	noStore   = "l-cccccccccccccccccccccccc"
	goodToken = "jwt-for-t-a"
)

func (a *pauseAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(b)))
	w.Header().Set("Content-Type", "application/json")
	refuse := func(status int, code, msg string) {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, code, msg)
	}
	if r.Header.Get("Authorization") != "Bearer key-acme" {
		refuse(401, "unauthorized", "the API key is not accepted")
		return
	}
	id, action, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/leases/"), "/")
	l, ok := a.leases[id]
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/leases":
		var out []apitype.LeaseView
		for _, id := range []string{leaseA, leaseB, noStore} {
			out = append(out, a.leases[id])
		}
		json.NewEncoder(w).Encode(out)
	case !ok:
		refuse(404, "lease_not_found", "lease not found")
	case r.Method == "GET" && action == "":
		json.NewEncoder(w).Encode(l)
	case r.Method == "POST" && action == "pause":
		if id == noStore {
			refuse(501, "no_snapshots", "this node keeps no snapshots (snapshots.store is not set)")
			return
		}
		var req apitype.PauseRequest
		json.Unmarshal(b, &req)
		p := apitype.PauseView{Lease: id, Task: l.Task, Template: l.Template, Kept: apitype.KeptFiles, Until: time.Now().Add(24 * time.Hour)}
		if req.Memory {
			p.Why = "no runtime of this node keeps memory across a pause: runc keeps the files only"
		}
		l.State, l.Created, l.Expires, l.Address = "paused", time.Now(), p.Until, ""
		a.leases[id] = l
		json.NewEncoder(w).Encode(p)
	case r.Method == "POST" && action == "resume":
		var req apitype.ResumeRequest
		json.Unmarshal(b, &req)
		if req.Token != goodToken {
			refuse(403, "token_refused", "task token refused: not a token of task "+l.Task)
			return
		}
		l.State, l.Expires, l.Restored = "running", time.Now().Add(time.Hour), &apitype.Restored{Snapshot: "sha256:feed", Files: 3, TookMS: 9}
		a.leases[id] = l
		json.NewEncoder(w).Encode(l)
	case r.Method == "POST" && action == "renew":
		json.NewEncoder(w).Encode(l)
	default:
		refuse(404, "not_found", "no route")
	}
}

// sent returns the calls made since the last, and forgets them.
func (a *pauseAPI) sent() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.calls
	a.calls = nil
	return out
}

func newPauseFixture(t *testing.T) (*pauseAPI, *httptest.Server) {
	t.Helper()
	now := time.Now()
	a := &pauseAPI{leases: map[string]apitype.LeaseView{}}
	for _, id := range []string{leaseA, leaseB, noStore} {
		a.leases[id] = apitype.LeaseView{ID: id, Template: "default", Task: "t-" + id[2:3], Node: "n1", Created: now, Expires: now.Add(time.Hour), State: "running"}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := e2b.New(e2b.Config{API: a, Template: func(string) (pool.Template, bool) { return pool.Template{CPUs: 1, MemoryMB: 512}, true },
		Secret: []byte("0123456789abcdef0123456789abcdef"), Node: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return a, srv
}

// do calls the E2B server; it returns the status, the headers and the decoded body.
func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr ...string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	req.Header.Set("X-API-KEY", "key-acme")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		var list []map[string]any
		if json.Unmarshal(b, &list) == nil {
			out = map[string]any{"list": list}
		}
	}
	return resp.StatusCode, resp.Header, out
}

// TestPauseAndConnect: the SDK's pause pauses the lease, keeping memory unless told not to, and
// says what was kept; a second pause is the SDK's false (409); a paused sandbox is listed and
// described as paused and is not running; connect resumes it with a task token for its task,
// and says what it needs without one.
func TestPauseAndConnect(t *testing.T) {
	a, srv := newPauseFixture(t)

	// The envd access token, as connect to a running sandbox gives it.
	st, _, out := do(t, srv, "POST", "/v2/sandboxes/"+leaseA+"/connect", `{}`)
	if st != http.StatusOK || out["envdAccessToken"] == "" {
		t.Fatalf("connect to a running sandbox: %d %v", st, out)
	}
	access := out["envdAccessToken"].(string)
	health := func() int {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/health", nil)
		req.Header.Set("E2b-Sandbox-Id", leaseA)
		req.Header.Set("X-Access-Token", access)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if h := health(); h != http.StatusNoContent {
		t.Fatalf("health of a running sandbox: %d", h)
	}
	a.sent()

	st, hdr, out := do(t, srv, "POST", "/sandboxes/"+leaseA+"/pause", `{}`)
	if st != http.StatusNoContent || hdr.Get(e2b.KeptHeader) != "files" || !strings.Contains(hdr.Get(e2b.WhyHeader), "keeps the files only") {
		t.Fatalf("pause: %d %v %v", st, hdr, out)
	}
	if got := a.sent(); !slices.Contains(got, "POST /v1/leases/"+leaseA+`/pause {"memory":true}`) {
		t.Errorf("pause without memory: false asked the node %q; E2B keeps memory by default", got)
	}
	if st, _, out := do(t, srv, "POST", "/sandboxes/"+leaseA+"/pause", `{}`); st != http.StatusConflict || !strings.Contains(fmt.Sprint(out["message"]), "paused already") {
		t.Errorf("a second pause: %d %v (the SDK reads 409 as false)", st, out)
	}
	if st, hdr, _ := do(t, srv, "POST", "/sandboxes/"+leaseB+"/pause", `{"memory":false}`); st != http.StatusNoContent || hdr.Get(e2b.WhyHeader) != "" {
		t.Errorf("pause keeping the files alone: %d %v", st, hdr)
	}
	if got := a.sent(); !slices.Contains(got, "POST /v1/leases/"+leaseB+"/pause {}") {
		t.Errorf("pause with memory: false asked the node %q", got)
	}

	// Paused: described, listed and filtered as such; not running.
	if st, _, out := do(t, srv, "GET", "/sandboxes/"+leaseA, ""); st != 200 || out["state"] != "paused" {
		t.Errorf("getInfo of a paused sandbox: %d %v", st, out)
	}
	for q, want := range map[string][]string{"state=paused": {leaseA, leaseB}, "state=running": {noStore}, "": {leaseA, leaseB, noStore},
		"state=running,paused": {leaseA, leaseB, noStore}} {
		_, _, out := do(t, srv, "GET", "/v2/sandboxes?"+q, "")
		var got []string
		for _, s := range out["list"].([]map[string]any) {
			got = append(got, s["sandboxID"].(string))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("list %q: %v, want %v", q, got, want)
		}
	}
	if h := health(); h != http.StatusBadGateway {
		t.Errorf("health of a paused sandbox: %d, want 502 (the SDK's isRunning false)", h)
	}

	// connect resumes it, with a task token for its task.
	a.sent()
	st, _, out = do(t, srv, "POST", "/v2/sandboxes/"+leaseA+"/connect", `{"timeout":120}`)
	if msg := fmt.Sprint(out["message"]); st != http.StatusBadRequest || !strings.Contains(msg, e2b.TokenHeader) || !strings.Contains(msg, "task t-a") {
		t.Errorf("connect to a paused sandbox without a token: %d %v", st, out)
	}
	if st, _, out := do(t, srv, "POST", "/v2/sandboxes/"+leaseA+"/connect", `{}`, e2b.TokenHeader, "jwt-of-another-task"); st != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["message"]), "token refused") {
		t.Errorf("connect with another task's token: %d %v", st, out)
	}
	if got := a.sent(); slices.ContainsFunc(got, func(c string) bool { return strings.Contains(c, "resume {}") }) {
		t.Errorf("the node was asked to resume without a token: %q", got)
	}
	st, _, out = do(t, srv, "POST", "/sandboxes/"+leaseA+"/resume", `{"timeout":120}`, e2b.TokenHeader, goodToken)
	if st != http.StatusCreated || out["sandboxID"] != leaseA || out["envdAccessToken"] == "" {
		t.Fatalf("resume: %d %v", st, out)
	}
	if got := a.sent(); !slices.Contains(got, "POST /v1/leases/"+leaseA+`/resume {"token":"`+goodToken+`","ttl":"2m0s"}`) {
		t.Errorf("resume asked the node %q", got)
	}
	if h := health(); h != http.StatusNoContent {
		t.Errorf("health once resumed: %d", h)
	}
}

// What cannot be paused is answered with E2B's codes and airlock's reasons.
func TestPauseRefusals(t *testing.T) {
	_, srv := newPauseFixture(t)
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"a sandbox that is not there", "/sandboxes/l-dddddddddddddddddddddddd/pause", `{}`, http.StatusNotFound, "lease not found"},
		{"on a node that keeps no snapshots", "/sandboxes/" + noStore + "/pause", `{}`, http.StatusNotImplemented, "keeps no snapshots"},
		{"a body that is not JSON", "/sandboxes/" + leaseA + "/pause", `{`, http.StatusBadRequest, "the pause request"},
		{"a fork", "/sandboxes/" + leaseA + "/fork", `{}`, http.StatusNotImplemented, "POST /v1/leases with from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, _, out := do(t, srv, "POST", tc.path, tc.body); st != tc.status || !strings.Contains(fmt.Sprint(out["message"]), tc.want) {
				t.Errorf("%d %v, want %d saying %q", st, out, tc.status, tc.want)
			}
		})
	}
}
