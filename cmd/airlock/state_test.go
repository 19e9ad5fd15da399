package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
)

// seen is one request the fake node saw: its route, the path value it named, and its body.
type seen struct {
	Route, Arg string
	Body       map[string]any
}

const snapID = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// stateNode is a fake node's API on loopback answering the routes of the state that travels
// (and lease creation and listing) with fixed answers; a ref or lease "gone" is answered 404.
// It returns the environment that points airlock at it, and what it saw.
func stateNode(t *testing.T) (env []string, calls func() []seen) {
	t.Helper()
	created := time.Now().Add(-time.Minute).UTC()
	snap := apitype.SnapshotView{ID: snapID, Name: "before-tests", Tenant: "acme", Template: "python", Image: "sha256:feed",
		Lease: "l-1", Created: created, Size: 4096, Stored: 4200, Files: 12, TookMS: 81}
	spaced := snap
	spaced.ID, spaced.Name = "sha256:"+strings.Repeat("e", 64), "two words"
	restored := &apitype.Restored{Snapshot: snapID, Files: 12, Size: 4096, TookMS: 40}
	lease := apitype.LeaseView{ID: "l-2", Template: "python", Task: "t-1", Node: "n1", Sandbox: "abcdef0123456789", Address: "10.0.0.2",
		Created: created, Expires: created.Add(time.Hour), State: "running", Restored: restored}
	pausedLease := apitype.LeaseView{ID: "l-1", Template: "python", Task: "t-1", Created: created, Expires: created.Add(24 * time.Hour), State: "paused"}
	paused := apitype.PauseView{Lease: "l-1", Task: "t-1", Template: "python", Kept: apitype.KeptFiles, Snapshot: "pause:l-1",
		Paused: created, Until: created.Add(24 * time.Hour), TookMS: 300, Why: "runc cannot checkpoint on this kernel"}
	answers := map[string]any{
		"POST /v1/leases":                lease,
		"GET /v1/leases":                 []apitype.LeaseView{lease, pausedLease},
		"POST /v1/leases/{id}/snapshots": snap,
		"GET /v1/snapshots":              []apitype.SnapshotView{snap, spaced},
		"GET /v1/snapshots/{ref}":        snap,
		"DELETE /v1/snapshots/{ref}":     nil,
		"POST /v1/leases/{id}/pause":     paused,
		"POST /v1/leases/{id}/resume":    lease,
	}
	var mu sync.Mutex
	var got []seen
	mux := http.NewServeMux()
	for route, v := range answers {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			c := seen{Route: route, Arg: r.PathValue("id") + r.PathValue("ref")}
			if b, _ := io.ReadAll(r.Body); len(b) > 0 {
				json.Unmarshal(b, &c.Body)
			}
			mu.Lock()
			got = append(got, c)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			switch {
			case c.Arg == "gone":
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"error":{"code":"no_such_snapshot","message":"no such snapshot: gone"}}`)
			case v == nil:
				w.WriteHeader(http.StatusNoContent)
			default:
				status := http.StatusOK
				if r.Method == http.MethodPost && route != "POST /v1/leases/{id}/pause" && route != "POST /v1/leases/{id}/resume" {
					status = http.StatusCreated
				}
				w.WriteHeader(status)
				json.NewEncoder(w).Encode(v)
			}
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return []string{"AIRLOCK_ADDR=" + srv.URL, "AIRLOCK_TOKEN=key-1"}, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

// Each command of the state that travels sends what its flags say, and prints the answer:
// the id on stdout where there is one, what happened on stderr.
func TestStateCommands(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stdin         string
		args          []string
		sent          []seen
		stdout        []string // each on stdout
		stderr        []string // each on stderr
		exactStdout   string   // when set, all of stdout
		wantExitCode1 bool
	}{
		{name: "snapshot with a name and paths", args: []string{"snapshot", "l-1", "--name", "before-tests", "--path", "/tmp/cache", "--path", "/workspace/.venv"},
			sent:        []seen{{"POST /v1/leases/{id}/snapshots", "l-1", map[string]any{"name": "before-tests", "paths": []any{"/tmp/cache", "/workspace/.venv"}}}},
			exactStdout: snapID + "\n", stderr: []string{`snapshot of l-1 ("before-tests"): 12 files, 4.0 KiB (4.1 KiB stored), in 81 ms`}},
		{name: "snapshot of the workspace alone", args: []string{"snapshot", "l-1"},
			sent: []seen{{"POST /v1/leases/{id}/snapshots", "l-1", map[string]any{}}}, exactStdout: snapID + "\n"},
		{name: "snapshots lists, a name of words quoted", args: []string{"snapshots"},
			sent:   []seen{{"GET /v1/snapshots", "", nil}},
			stdout: []string{snapID + "  before-tests ", `"two words"`, "12 files", "from l-1"}},
		{name: "snapshots ls", args: []string{"snapshots", "ls", "--json"},
			sent: []seen{{"GET /v1/snapshots", "", nil}}, stdout: []string{`"id":"` + snapID + `"`, `"name":"two words"`}},
		{name: "snapshots show", args: []string{"snapshots", "show", "before-tests"},
			sent:   []seen{{"GET /v1/snapshots/{ref}", "before-tests", nil}},
			stdout: []string{"id        " + snapID, "image     sha256:feed", "4.0 KiB in 12 files", "paths     the workspace\n"}},
		{name: "snapshots rm goes on past a ref that fails, and exits 1", args: []string{"snapshots", "rm", "gone", snapID},
			sent:   []seen{{"DELETE /v1/snapshots/{ref}", "gone", nil}, {"DELETE /v1/snapshots/{ref}", snapID, nil}},
			stderr: []string{"airlock: gone: no such snapshot: gone (404 no_such_snapshot)", "deleted " + snapID}, wantExitCode1: true},
		{name: "lease from a snapshot says what it restored and how long it took", args: []string{"lease", "--from", "before-tests", "--allow", "pypi.org"},
			sent:        []seen{{"POST /v1/leases", "", map[string]any{"template": "", "from": "before-tests", "allow": []any{"pypi.org"}}}},
			exactStdout: "l-2\n", stderr: []string{"restored 12 files (4.0 KiB) from " + snapID + " in 40 ms"}},
		{name: "lease with caches empty and a token from stdin", stdin: "jwt-from-stdin\n", args: []string{"lease", "--template", "python", "--no-caches", "--token", "-"},
			sent: []seen{{"POST /v1/leases", "", map[string]any{"template": "python", "no_caches": true, "token": "jwt-from-stdin"}}}},
		{name: "lease that writes its caches back", args: []string{"lease", "--template", "python", "--write-caches", "--token", "jwt"},
			sent: []seen{{"POST /v1/leases", "", map[string]any{"template": "python", "write_caches": true, "token": "jwt"}}}},
		{name: "pause says what was kept and why", args: []string{"pause", "l-1", "--memory"},
			sent:        []seen{{"POST /v1/leases/{id}/pause", "l-1", map[string]any{"memory": true}}},
			exactStdout: "kept: files\nwhy: runc cannot checkpoint on this kernel\n", stderr: []string{"paused l-1 (task t-1) in 300 ms", "airlock resume l-1 --token JWT"}},
		{name: "pause --json", args: []string{"pause", "--json", "l-1"},
			sent: []seen{{"POST /v1/leases/{id}/pause", "l-1", map[string]any{}}}, stdout: []string{`"kept":"files"`, `"until":`}},
		{name: "resume", args: []string{"resume", "l-1", "--token", "jwt", "--ttl", "1h"},
			sent:        []seen{{"POST /v1/leases/{id}/resume", "l-1", map[string]any{"token": "jwt", "ttl": "1h0m0s"}}},
			exactStdout: "l-2\n", stderr: []string{"resumed l-2", "restored 12 files (4.0 KiB) from " + snapID + " in 40 ms"}},
		{name: "resume with the token on stdin", stdin: " jwt-piped \n", args: []string{"resume", "--token", "-", "l-1"},
			sent: []seen{{"POST /v1/leases/{id}/resume", "l-1", map[string]any{"token": "jwt-piped"}}}},
		{name: "leases shows the paused one as paused", args: []string{"leases"},
			sent: []seen{{"GET /v1/leases", "", nil}}, stdout: []string{"l-2 ", "node n1", "\nl-1 ", "paused        until "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, calls := stateNode(t)
			out, errs, code := airlockIn(t, tc.stdin, env, tc.args...)
			if want := map[bool]int{false: 0, true: 1}[tc.wantExitCode1]; code != want {
				t.Errorf("exit %d, want %d; stderr %q", code, want, errs)
			}
			if got := calls(); !reflect.DeepEqual(got, tc.sent) {
				t.Errorf("the node saw %+v, want %+v", got, tc.sent)
			}
			if tc.exactStdout != "" && out != tc.exactStdout {
				t.Errorf("stdout %q, want %q", out, tc.exactStdout)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout %q lacks %q", out, s)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errs, s) {
					t.Errorf("stderr %q lacks %q", errs, s)
				}
			}
		})
	}
}

// What the state commands cannot do without is a usage error (exit 2), said before any call.
func TestStateUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		stdin      string
		args       []string
		code       int
	}{
		{"snapshot without a lease", "usage: airlock snapshot LEASE", "", []string{"snapshot"}, 2},
		{"snapshot of two leases", "usage: airlock snapshot LEASE", "", []string{"snapshot", "l-1", "l-2"}, 2},
		{"snapshots show without a ref", "usage: airlock snapshots", "", []string{"snapshots", "show"}, 2},
		{"snapshots rm without a ref", "usage: airlock snapshots", "", []string{"snapshots", "rm"}, 2},
		{"snapshots ls with a ref", "usage: airlock snapshots", "", []string{"snapshots", "ls", "x"}, 2},
		{"snapshots of an unknown kind", `unknown subcommand "nope"`, "", []string{"snapshots", "nope"}, 2},
		{"pause without a lease", "usage: airlock pause LEASE", "", []string{"pause", "--memory"}, 2},
		{"resume without a token", "give --token or --allow (not both): a paused lease keeps no task token", "", []string{"resume", "l-1"}, 2},
		{"resume with an empty stdin for its token", "stdin held no task token", "\n", []string{"resume", "l-1", "--token", "-"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, calls := stateNode(t)
			_, errs, code := airlockIn(t, tc.stdin, env, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d saying %q", code, errs, tc.code, tc.want)
			}
			if got := calls(); len(got) != 0 {
				t.Errorf("the node was called: %+v", got)
			}
		})
	}
}

// Completion offers snapshot names after --from and in `airlock snapshots`, and lease ids
// elsewhere; a name of words, which one shell word cannot hold, is left out.
func TestCompletionOfSnapshots(t *testing.T) {
	script, _, _ := airlock(t, nil, "completion", "bash")
	// airlock itself stands in: a listing of two named snapshots, one of words, and an unnamed
	// one, and two leases.
	fake := `airlock() {
	case "$1" in
	snapshots) printf '%s\n' 'sha256:aa  before-tests  python' 'sha256:bb  "two words"  python' 'sha256:cc  -  python' ;;
	leases) printf '%s\n' 'l-1 python t-1' 'l-2 python t-2' ;;
	esac
}
`
	for _, tc := range []struct {
		name  string
		words []string
		want  string
	}{
		{"after --from", []string{"airlock", "lease", "--from", ""}, "before-tests"},
		{"snapshots rm", []string{"airlock", "snapshots", "rm", ""}, "ls show rm --json --help before-tests"},
		{"a lease elsewhere", []string{"airlock", "pause", ""}, "--memory --keep --json --help l-1 l-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := make([]string, len(tc.words))
			for i, w := range tc.words {
				q[i] = "'" + w + "'"
			}
			line := script + fake + "COMP_WORDS=(" + strings.Join(q, " ") + "); COMP_CWORD=" + strconv.Itoa(len(tc.words)-1) + `; _airlock; echo "${COMPREPLY[*]}"`
			b, err := exec.Command("bash", "-c", line).Output()
			if got := strings.TrimSpace(string(b)); err != nil || got != tc.want {
				t.Errorf("offered %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}
