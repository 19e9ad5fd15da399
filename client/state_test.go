package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/client"
)

// call is one request the fake API saw: its route, the path values it named and its body.
type call struct {
	Route, ID, Ref string
	Body           map[string]any
}

// fakeAPI answers the state routes with answer's reply for each route, recording every call.
func fakeAPI(t *testing.T, answer map[string]func(w http.ResponseWriter)) (*client.Client, *[]call) {
	t.Helper()
	var got []call
	mux := http.NewServeMux()
	for _, route := range []string{"POST /v1/leases", "POST /v1/leases/{id}/snapshots", "GET /v1/snapshots", "GET /v1/snapshots/{ref}",
		"DELETE /v1/snapshots/{ref}", "POST /v1/leases/{id}/pause", "POST /v1/leases/{id}/resume", "/"} {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer key-1" {
				t.Errorf("%s: Authorization %q", route, r.Header.Get("Authorization"))
			}
			c := call{Route: route, ID: r.PathValue("id"), Ref: r.PathValue("ref")}
			if b, _ := io.ReadAll(r.Body); len(b) > 0 {
				if err := json.Unmarshal(b, &c.Body); err != nil {
					t.Errorf("%s: a body that is not JSON: %q", route, b)
				}
			}
			got = append(got, c)
			if a := answer[route]; a != nil {
				a(w)
				return
			}
			http.Error(w, `{"error":{"code":"not_found","message":"no route"}}`, http.StatusNotFound)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &client.Client{Addr: srv.URL, Token: "key-1"}, &got
}

func reply(status int, v any) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if v != nil {
			json.NewEncoder(w).Encode(v)
		}
	}
}

const snapID = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// Each call of the state that travels sends the route and body the API takes, and reads its
// answer whole.
func TestStateCalls(t *testing.T) {
	created := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	snap := apitype.SnapshotView{ID: snapID, Name: "before-tests", Tenant: "acme", Template: "python", Image: "sha256:feed",
		Lease: "l-1", Created: created, Size: 4096, Stored: 4200, Files: 12, Paths: []string{"/tmp/cache"}, TookMS: 81}
	restored := &apitype.Restored{Snapshot: snapID, Files: 12, Size: 4096, TookMS: 40}
	running := apitype.LeaseView{ID: "l-2", Template: "python", Task: "t-1", State: "running", Restored: restored}
	paused := apitype.PauseView{Lease: "l-1", Task: "t-1", Template: "python", Kept: apitype.KeptFiles, Snapshot: "pause:l-1",
		Paused: created, Until: created.Add(24 * time.Hour), TookMS: 300, Why: "runc keeps no memory"}
	c, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST /v1/leases":                reply(http.StatusCreated, running),
		"POST /v1/leases/{id}/snapshots": reply(http.StatusCreated, snap),
		"GET /v1/snapshots":              reply(http.StatusOK, []apitype.SnapshotView{snap}),
		"GET /v1/snapshots/{ref}":        reply(http.StatusOK, snap),
		"DELETE /v1/snapshots/{ref}":     reply(http.StatusNoContent, nil),
		"POST /v1/leases/{id}/pause":     reply(http.StatusOK, paused),
		"POST /v1/leases/{id}/resume":    reply(http.StatusOK, running),
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		do   func() (any, error)
		want any
		sent call
	}{
		{"snapshot with a name and a path", func() (any, error) { return c.Snapshot(ctx, "l-1", "before-tests", []string{"/tmp/cache"}) }, snap,
			call{Route: "POST /v1/leases/{id}/snapshots", ID: "l-1", Body: map[string]any{"name": "before-tests", "paths": []any{"/tmp/cache"}}}},
		{"snapshot of the workspace alone", func() (any, error) { return c.Snapshot(ctx, "l-1", "", nil) }, snap,
			call{Route: "POST /v1/leases/{id}/snapshots", ID: "l-1", Body: map[string]any{}}},
		{"snapshots", func() (any, error) { return c.Snapshots(ctx) }, []apitype.SnapshotView{snap},
			call{Route: "GET /v1/snapshots"}},
		{"snapshot info by id", func() (any, error) { return c.SnapshotInfo(ctx, snapID) }, snap,
			call{Route: "GET /v1/snapshots/{ref}", Ref: snapID}},
		{"snapshot info by a name with a space and a slash", func() (any, error) { return c.SnapshotInfo(ctx, "before tests/1") }, snap,
			call{Route: "GET /v1/snapshots/{ref}", Ref: "before tests/1"}},
		{"delete snapshot", func() (any, error) { return nil, c.DeleteSnapshot(ctx, "before-tests") }, nil,
			call{Route: "DELETE /v1/snapshots/{ref}", Ref: "before-tests"}},
		{"lease from a snapshot, template left to it, caches empty", func() (any, error) {
			return c.Lease(ctx, apitype.LeaseRequest{From: "before-tests", NoCaches: true, Token: "jwt"})
		}, running, call{Route: "POST /v1/leases", Body: map[string]any{"template": "", "from": "before-tests", "no_caches": true, "token": "jwt"}}},
		{"pause", func() (any, error) { return c.Pause(ctx, "l-1", false) }, paused,
			call{Route: "POST /v1/leases/{id}/pause", ID: "l-1", Body: map[string]any{}}},
		{"pause keeping memory", func() (any, error) { return c.Pause(ctx, "l-1", true) }, paused,
			call{Route: "POST /v1/leases/{id}/pause", ID: "l-1", Body: map[string]any{"memory": true}}},
		{"resume", func() (any, error) { return c.Resume(ctx, "l-1", "jwt", 0) }, running,
			call{Route: "POST /v1/leases/{id}/resume", ID: "l-1", Body: map[string]any{"token": "jwt"}}},
		{"resume for an hour", func() (any, error) { return c.Resume(ctx, "l-1", "jwt", time.Hour) }, running,
			call{Route: "POST /v1/leases/{id}/resume", ID: "l-1", Body: map[string]any{"token": "jwt", "ttl": "1h0m0s"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			*got = nil
			v, err := tc.do()
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != nil && !reflect.DeepEqual(v, tc.want) {
				t.Errorf("answer %+v, want %+v", v, tc.want)
			}
			if len(*got) != 1 || !reflect.DeepEqual((*got)[0], tc.sent) {
				t.Errorf("the API saw %+v, want %+v", *got, tc.sent)
			}
		})
	}
}

// The API's refusals come back as *client.Error with their status, code and message.
func TestStateErrors(t *testing.T) {
	refuse := func(status int, code, msg string) func(http.ResponseWriter) {
		return reply(status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
	}
	c, _ := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST /v1/leases/{id}/snapshots": refuse(http.StatusRequestEntityTooLarge, "too_large", "the workspace holds 900 MiB; template python keeps at most 512 MiB"),
		"GET /v1/snapshots/{ref}":        refuse(http.StatusNotFound, "no_such_snapshot", "no such snapshot"),
		"POST /v1/leases":                refuse(http.StatusConflict, "image_gone", "the snapshot's image is gone"),
		"POST /v1/leases/{id}/pause":     refuse(http.StatusNotImplemented, "no_snapshots", "this node keeps no snapshots"),
		"POST /v1/leases/{id}/resume":    refuse(http.StatusBadRequest, "token_required", "a task token for the paused lease's task is required"),
		"DELETE /v1/snapshots/{ref}":     refuse(http.StatusServiceUnavailable, "store_down", "the snapshot store is down"),
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		do     func() error
		status int
		code   string
	}{
		{"too large", func() error { _, err := c.Snapshot(ctx, "l-1", "", nil); return err }, 413, "too_large"},
		{"no such snapshot", func() error { _, err := c.SnapshotInfo(ctx, "nope"); return err }, 404, "no_such_snapshot"},
		{"image gone", func() error { _, err := c.Lease(ctx, apitype.LeaseRequest{From: snapID}); return err }, 409, "image_gone"},
		{"no snapshots kept", func() error { _, err := c.Pause(ctx, "l-1", true); return err }, 501, "no_snapshots"},
		{"no token", func() error { _, err := c.Resume(ctx, "l-1", "", 0); return err }, 400, "token_required"},
		{"store down", func() error { return c.DeleteSnapshot(ctx, snapID) }, 503, "store_down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae *client.Error
			if err := tc.do(); !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code || ae.Message == "" {
				t.Errorf("got %v, want a %d %s *client.Error with its message", err, tc.status, tc.code)
			}
		})
	}
}
