package mcpserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/mcpserver"
)

// stateNode is a node's API on loopback for the state that travels, answering as the real one
// does with what a snapshot store would hold (the pool's own tests cover the store): leases are
// numbered l-1, l-2, ...; the snapshot "gone" is none; the lease "l-nostore" is on a node that
// keeps no snapshots. It records each call as "METHOD PATH BODY".
type stateNode struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []string
	n     int
}

const snapID = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func newStateNode(t *testing.T) *stateNode {
	t.Helper()
	f := &stateNode{}
	now := time.Now().UTC()
	snap := apitype.SnapshotView{ID: snapID, Name: "green", Tenant: "acme", Template: "default", Lease: "l-1", Created: now, Size: 2048, Files: 3, TookMS: 12}
	refuse := func(w http.ResponseWriter, status int, code, msg string) {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, code, msg)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/leases", func(w http.ResponseWriter, r *http.Request) {
		var req apitype.LeaseRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.n++
		l := apitype.LeaseView{ID: fmt.Sprintf("l-%d", f.n), Template: "default", Task: "t-1", Expires: now.Add(time.Hour), State: "running"}
		f.mu.Unlock()
		if req.From == "gone" {
			refuse(w, 404, "no_such_snapshot", "no such snapshot: gone")
			return
		}
		if req.From != "" {
			l.Restored = &apitype.Restored{Snapshot: snapID, Files: 3, Size: 2048, TookMS: 7}
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(l)
	})
	mux.HandleFunc("GET /v1/leases", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode([]apitype.LeaseView{{ID: "l-9", Template: "default", Task: "t-9", State: "paused", Expires: now.Add(24 * time.Hour)}})
	})
	mux.HandleFunc("DELETE /v1/leases/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /v1/leases/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "l-nostore" {
			refuse(w, 501, "no_snapshots", "this node keeps no snapshots (snapshots.store is not set)")
			return
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(snap)
	})
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode([]apitype.SnapshotView{snap}) })
	mux.HandleFunc("DELETE /v1/snapshots/{ref}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /v1/leases/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(apitype.PauseView{Lease: r.PathValue("id"), Task: "t-1", Template: "default", Kept: apitype.KeptFiles,
			Snapshot: "sha256:feed", Paused: now, Until: now.Add(24 * time.Hour), TookMS: 30, Why: "runc keeps the files only"})
	})
	mux.HandleFunc("POST /v1/leases/{id}/resume", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(apitype.LeaseView{ID: r.PathValue("id"), Template: "default", Task: "t-1", State: "running",
			Expires: now.Add(time.Hour), Restored: &apitype.Restored{Snapshot: "sha256:feed", Files: 3, Size: 2048, TookMS: 9}})
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls = append(f.calls, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+strings.TrimSpace(string(b))))
		f.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		w.Header().Set("Content-Type", "application/json")
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// sent returns the calls recorded since the last, and forgets them.
func (f *stateNode) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

// TestStateTools: snapshot, list and delete snapshots, a sandbox from one, pause and resume,
// each sending what its arguments say and answering what the node did; a paused sandbox
// outlives the session, a resumed one is the session's again.
func TestStateTools(t *testing.T) {
	f := newStateNode(t)
	s := mcpserver.New(mcpserver.Config{Addr: f.srv.URL, Key: "key-acme"})
	cs := connect(t, s, nil)

	var sb, fromSnap, paused mcpserver.SandboxOut
	call(t, cs, "sandbox_create", map[string]any{"allow": []string{"a.example"}}, &sb)
	f.sent()
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		out        any
		want       any
		sent       []string
	}{
		{"snapshot with a name and a path", "sandbox_snapshot", map[string]any{"lease": "l-1", "name": "green", "paths": []string{"/tmp/cache"}}, &apitype.SnapshotView{},
			&apitype.SnapshotView{ID: snapID, Name: "green", Tenant: "acme", Template: "default", Lease: "l-1", Size: 2048, Files: 3, TookMS: 12},
			[]string{`POST /v1/leases/l-1/snapshots {"name":"green","paths":["/tmp/cache"]}`}},
		{"snapshot_list", "snapshot_list", map[string]any{}, &mcpserver.SnapshotListOut{}, nil, []string{"GET /v1/snapshots"}},
		{"snapshot_delete", "snapshot_delete", map[string]any{"snapshot": "green"}, &mcpserver.Done{},
			&mcpserver.Done{OK: true, Message: "deleted snapshot green"}, []string{"DELETE /v1/snapshots/green"}},
		{"a sandbox from a snapshot, its template the snapshot's", "sandbox_create", map[string]any{"from": "green", "no_caches": true}, &fromSnap, nil,
			[]string{`POST /v1/leases {"template":"","from":"green","no_caches":true}`}},
		{"pause keeping memory where it can", "sandbox_pause", map[string]any{"lease": "l-1", "memory": true}, &mcpserver.PauseOut{}, nil,
			[]string{`POST /v1/leases/l-1/pause {"memory":true}`}},
		{"sandbox_list shows a paused sandbox", "sandbox_list", map[string]any{}, &mcpserver.ListOut{}, nil, []string{"GET /v1/leases"}},
		{"resume for an hour", "sandbox_resume", map[string]any{"lease": "l-1", "token": "jwt", "ttl": "1h"}, &paused, nil,
			[]string{`POST /v1/leases/l-1/resume {"token":"jwt","ttl":"1h0m0s"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if msg := call(t, cs, tc.tool, tc.args, tc.out); msg != "" {
				t.Fatal(msg)
			}
			if got := f.sent(); !slices.Equal(got, tc.sent) {
				t.Errorf("the node saw %q, want %q", got, tc.sent)
			}
			if tc.want == nil {
				return
			}
			if v, ok := tc.out.(*apitype.SnapshotView); ok {
				v.Created = time.Time{}
			}
			if !reflect.DeepEqual(tc.out, tc.want) {
				t.Errorf("answered %+v, want %+v", tc.out, tc.want)
			}
		})
	}
	if r := fromSnap.Restored; fromSnap.Lease != "l-2" || r == nil || r.Files != 3 || r.TookMS != 7 {
		t.Errorf("sandbox_create from a snapshot: %+v, want what it restored and how long it took", fromSnap)
	}
	if paused.State != "running" || paused.Restored == nil {
		t.Errorf("sandbox_resume: %+v", paused)
	}

	// The answer of a pause says what was kept, why not memory, and how to resume.
	var p mcpserver.PauseOut
	call(t, cs, "sandbox_create", map[string]any{"allow": []string{"a.example"}}, &sb)
	call(t, cs, "sandbox_pause", map[string]any{"lease": sb.Lease}, &p)
	if p.Kept != apitype.KeptFiles || p.Why == "" || p.Task != "t-1" || !strings.Contains(p.Resume, "task token for task t-1") {
		t.Errorf("sandbox_pause: %+v", p)
	}
	var list mcpserver.ListOut
	call(t, cs, "sandbox_list", nil, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].State != "paused" {
		t.Errorf("sandbox_list: %+v", list)
	}
	f.sent()

	// The session ends: the sandbox from the snapshot (l-2) and the one resumed (l-1) are
	// released; the one left paused (l-3) is not, or what its pause kept would go.
	cs.Close()
	s.Close()
	got := f.sent()
	slices.Sort(got)
	if want := []string{"DELETE /v1/leases/l-1", "DELETE /v1/leases/l-2"}; !slices.Equal(got, want) {
		t.Errorf("at the session's end the node saw %q, want %q", got, want)
	}
}

// TestCreateWritesCaches: sandbox_create asks for the template's caches to be written back only
// when told.
func TestCreateWritesCaches(t *testing.T) {
	f := newStateNode(t)
	cs := connect(t, mcpserver.New(mcpserver.Config{Addr: f.srv.URL, Key: "key-acme"}), nil)
	defer cs.Close()
	var sb mcpserver.SandboxOut
	if msg := call(t, cs, "sandbox_create", map[string]any{"template": "python", "write_caches": true}, &sb); msg != "" {
		t.Fatal(msg)
	}
	if got, want := f.sent(), []string{`POST /v1/leases {"template":"python","write_caches":true}`}; !slices.Equal(got, want) {
		t.Errorf("the node saw %q, want %q", got, want)
	}
}

// The state tools' refusals say what to do next, and what cannot be sent is refused before a
// call.
func TestStateToolErrors(t *testing.T) {
	f := newStateNode(t)
	cs := connect(t, mcpserver.New(mcpserver.Config{Addr: f.srv.URL, Key: "key-acme"}), nil)
	defer cs.Close()
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
		sent bool
	}{
		{"sandbox_create", map[string]any{"from": "gone"}, "list your snapshots with snapshot_list", true},
		{"sandbox_snapshot", map[string]any{"lease": "l-nostore"}, "this node keeps no snapshots", true},
		{"sandbox_resume", map[string]any{"lease": "l-1"}, `missing properties: ["token"]`, false},
		{"sandbox_resume", map[string]any{"lease": "l-1", "token": ""}, "token is required: a task token for the paused sandbox's task", false},
		{"sandbox_resume", map[string]any{"lease": "l-1", "token": "jwt", "ttl": "soon"}, `ttl "soon" is not a duration`, false},
		{"snapshot_delete", map[string]any{"snapshot": ""}, "snapshot is required", false},
	} {
		t.Run(tc.tool+" "+tc.want, func(t *testing.T) {
			if msg := call(t, cs, tc.tool, tc.args, nil); !strings.Contains(msg, tc.want) {
				t.Errorf("%q, want it to say %q", msg, tc.want)
			}
			if got := f.sent(); (len(got) > 0) != tc.sent {
				t.Errorf("the node saw %q; a call was expected: %v", got, tc.sent)
			}
		})
	}
}
