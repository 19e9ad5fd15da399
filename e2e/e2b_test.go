package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/pool"
)

// e2bSDKVersion is the E2B JavaScript SDK the test drives airlock with, installed from the npm
// registry once into the cache.
const e2bSDKVersion = "2.51.0"

// runE2BScript runs testdata/e2b/sdk.mjs with args on the real SDK against n's E2B listener
// and returns its steps by name.
func runE2BScript(t *testing.T, n *shared, timeout time.Duration, args ...string) map[string]json.RawMessage {
	t.Helper()
	script := npmScript(t, "e2b", e2bSDKVersion, "testdata/e2b/sdk.mjs")
	if n.client.E2B == "" {
		t.Fatal("the node serves no E2B listener (e2b.listen)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	// The two variables a team coming from E2B changes, and an airlock API key as E2B's.
	cmd.Env = append(os.Environ(), "E2B_API_URL="+n.client.E2B, "E2B_SANDBOX_URL="+n.client.E2B, "E2B_API_KEY="+n.client.Token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	steps := transcript(out)
	if err != nil || steps["fatal"] != nil {
		t.Fatalf("the SDK script (%v): %s\nstdout:\n%s\nstderr:\n%s", err, steps["fatal"], out, stderr.String())
	}
	return steps
}

// sdkError is what the script records of a call that threw.
type sdkError struct {
	OK       any    `json:"ok"`
	Error    string `json:"error"`
	Message  string `json:"message"`
	ExitCode *int   `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// TestE2BSDK: the unchanged E2B JavaScript SDK, pointed at airlock by E2B_API_URL and
// E2B_SANDBOX_URL, creates sandboxes from the default and python templates, runs commands
// (streamed, with the sandbox's variables, a non-zero exit raising CommandExitError), writes,
// reads, lists, moves and removes files, watches a folder, runs a background process and
// reconnects to it, feeds a process's stdin, drives a terminal, makes an allowed request that
// gets an injected credential and a denied one whose explanation reaches the SDK's error, sets
// a timeout, lists, and kills; a sandbox bound to a task token of the test's is paused with its
// files kept and resumed by connect with another token of its task; what airlock denies by
// default is refused at create with how to grant it. The audit trail shows every step under the
// lease.
func TestE2BSDK(t *testing.T) {
	n := sharedNode(t)
	scopes := []map[string]any{{"host": "api.example.test"}}
	steps := runE2BScript(t, n, 4*time.Minute, "run", mintToken(t, "e2b-held", scopes, 10*time.Minute), mintToken(t, "e2b-held", scopes, 10*time.Minute))
	get := func(name string, v any) {
		t.Helper()
		raw, ok := steps[name]
		if !ok {
			t.Fatalf("the script printed no step %q", name)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("step %s: %v in %s", name, err, raw)
		}
	}
	text := func(name string) string { var s string; get(name, &s); return s }
	failed := func(name string) sdkError { var e sdkError; get(name, &e); return e }

	for name, want := range map[string]string{"refuse_internet": "denies every destination by default", "refuse_denyout": "allowOut",
		"refuse_secret_env": "GITHUB_TOKEN names a secret"} {
		if e := failed(name); e.OK != nil || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %+v, want an error saying %q", name, e, want)
		}
	}
	var created struct{ ID string }
	get("created", &created)
	var info struct {
		TemplateID string            `json:"templateId"`
		State      string            `json:"state"`
		Metadata   map[string]string `json:"metadata"`
	}
	get("info", &info)
	if info.TemplateID != "default" || info.State != "running" || info.Metadata["suite"] != "e2b-sdk" {
		t.Errorf("getInfo: %+v", info)
	}
	var running bool
	if get("running", &running); !running {
		t.Error("isRunning is false for a live sandbox")
	}

	var run struct {
		Stdout, Stderr string
		ExitCode       int
		Chunks         int
	}
	get("run", &run)
	if run.Stdout != "one\ntwo\n" || run.Stderr != "to-stderr\n" || run.ExitCode != 0 || run.Chunks < 2 {
		t.Errorf("commands.run: %+v (the output must stream: two chunks at least)", run)
	}
	if got := text("run_env"); got != "hello from envs from /workspace\n" {
		t.Errorf("the sandbox's envs and working folder: %q", got)
	}
	if e := failed("run_fail"); e.Error != "CommandExitError" || e.ExitCode == nil || *e.ExitCode != 3 || e.Stdout != "partial\n" {
		t.Errorf("a non-zero exit: %+v", e)
	}

	if got := text("read"); got != "hello, file\n" {
		t.Errorf("files.read: %q", got)
	}
	if got := text("read_gzip"); got != "gzip body" {
		t.Errorf("a gzip upload read back: %q", got)
	}
	if e := failed("read_missing"); e.Error != "FileNotFoundError" && e.Error != "NotFoundError" {
		t.Errorf("reading a missing file: %+v", e)
	}
	var list []struct {
		Name, Type string
		Size       int
	}
	get("list", &list)
	names := []string{}
	for _, e := range list {
		names = append(names, e.Name+":"+e.Type)
	}
	if !slices.Equal(names, []string{"gzip.txt:file", "hello.txt:file", "octet.txt:file"}) {
		t.Errorf("files.list: %v", list)
	}
	var exists, made []bool
	if get("exists", &exists); !slices.Equal(exists, []bool{true, false}) {
		t.Errorf("files.exists: %v", exists)
	}
	if get("make_dir", &made); !slices.Equal(made, []bool{true, false}) {
		t.Errorf("files.makeDir, then again: %v (false when it already exists)", made)
	}
	var removed bool
	if get("removed", &removed); removed {
		t.Error("files.remove left the folder")
	}
	if e := failed("outside"); e.OK != nil || !strings.Contains(e.Message, "outside the workspace") {
		t.Errorf("reading outside the workspace: %+v", e)
	}
	if got := text("run_reads_file"); got != "octet body" {
		t.Errorf("a command reads what files.write and files.rename made: %q", got)
	}
	var watched []struct{ Name, Type string }
	get("watch", &watched)
	if !slices.ContainsFunc(watched, func(e struct{ Name, Type string }) bool { return e.Name == "watched.txt" && e.Type == "create" }) {
		t.Errorf("watchDir saw %v, want watched.txt created", watched)
	}

	var bg struct {
		Pid                                      int
		Listed, Reconnected, Killed, KilledAgain bool
		Ended                                    string
	}
	get("background", &bg)
	if bg.Pid == 0 || !bg.Listed || !bg.Reconnected || !bg.Killed || bg.KilledAgain || bg.Ended != "CommandExitError" {
		t.Errorf("a background process: %+v", bg)
	}
	if got := text("stdin"); got != "typed in\n" {
		t.Errorf("stdin: %q", got)
	}
	var pty struct {
		Result          sdkError
		SawOutput, Size bool
	}
	if get("pty", &pty); !pty.SawOutput || !pty.Size {
		t.Errorf("a terminal: %+v", pty)
	}

	if got := text("allowed"); !strings.Contains(got, "upstream: whoami ok") {
		t.Errorf("the allowed request: %q", got)
	}
	demo, err := n.demoValue()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(n.up.seen(), "Bearer "+demo) {
		t.Errorf("the upstream did not get the injected credential: %v", n.up.seen())
	}
	if e := failed("denied"); e.Error != "CommandExitError" || !strings.Contains(e.Stdout+e.Stderr, "denied by rule scope-miss") {
		t.Errorf("the denied request: %+v, want the gateway's explanation in the SDK's error", e)
	}
	var endAt time.Time
	if get("timeout", &endAt); time.Until(endAt) < 4*time.Minute {
		t.Errorf("setTimeout(300 s): the sandbox ends at %s", endAt)
	}
	var listed []string
	if get("listed", &listed); !slices.Equal(listed, []string{created.ID}) {
		t.Errorf("Sandbox.list by metadata: %v", listed)
	}
	if e := failed("pause"); e.OK != true {
		t.Errorf("pause: %+v, want true", e)
	}
	var paused struct {
		State   string
		Running bool
	}
	if get("paused", &paused); paused.State != "paused" || paused.Running {
		t.Errorf("a paused sandbox: %+v, want state paused and not running", paused)
	}
	if e := failed("pause_again"); e.OK != false {
		t.Errorf("a second pause: %+v, want false", e)
	}
	if e := failed("connect_no_token"); e.OK != nil || !strings.Contains(e.Message, "X-Airlock-Token") {
		t.Errorf("connect to a paused sandbox with no task token: %+v, want an error naming X-Airlock-Token", e)
	}
	held := text("held")
	var resumed struct {
		ID        string
		Running   bool
		Read, Run string
	}
	if get("resumed", &resumed); resumed.ID != held || !resumed.Running || resumed.Read != "kept across the pause\n" || resumed.Run != resumed.Read {
		t.Errorf("connect with a task token of the paused sandbox's task: %+v", resumed)
	}
	heldRecs := n.trailUntil(t, held, func(rs []audit.Record) bool {
		return hasAll(events(rs), "lease/pause", "lease/resume", "lease/release")
	})
	if got := events(heldRecs); !hasAll(got, "lease/pause", "lease/resume", "lease/release") {
		t.Errorf("the paused sandbox's trail: %v, want its pause, resume and release", got)
	}
	if got := text("python"); got != "42\n" {
		t.Errorf("the python template: %q", got)
	}
	var killed, killedAgain, runningAfter bool
	get("killed", &killed)
	get("killed_again", &killedAgain)
	get("running_after", &runningAfter)
	if !killed || killedAgain || runningAfter {
		t.Errorf("kill %v, kill again %v, running after %v", killed, killedAgain, runningAfter)
	}
	if e := failed("connect_after"); e.OK != nil {
		t.Errorf("connecting to a killed sandbox: %+v", e)
	}

	// The trail, under the lease: its bind, each command the SDK ran, the files, both requests,
	// and its end.
	recs := n.trailUntil(t, created.ID, func(rs []audit.Record) bool { return events(rs)["release"] })
	want := map[string]func(audit.Record) bool{
		"bind": func(r audit.Record) bool { return r.Kind == audit.KindLease && r.Event == "bind" },
		"the streamed command": func(r audit.Record) bool {
			return r.Kind == audit.KindExec && r.Event == "process-exit" && strings.Contains(strings.Join(r.Command, " "), "echo one; sleep 0.3")
		},
		"the failing command": func(r audit.Record) bool {
			return r.Kind == audit.KindExec && r.ExitCode != nil && *r.ExitCode == 3
		},
		"the kill": func(r audit.Record) bool {
			return r.Kind == audit.KindExec && r.Event == "process-signal" && r.Reason == "KILL"
		},
		"the upload": func(r audit.Record) bool {
			return r.Kind == audit.KindFile && r.Event == "upload" && strings.HasSuffix(r.Path, "notes/hello.txt")
		},
		"the download": func(r audit.Record) bool {
			return r.Kind == audit.KindFile && r.Event == "download" && strings.HasSuffix(r.Path, "notes/hello.txt")
		},
		"the move": func(r audit.Record) bool { return r.Kind == audit.KindFile && r.Event == "move" },
		"the allowed request": func(r audit.Record) bool {
			return r.Kind == audit.KindHTTP && r.Decision == audit.Allow && r.Host == "api.example.test" && r.Credential == "demo"
		},
		"the denied request": func(r audit.Record) bool {
			return r.Kind == audit.KindHTTP && r.Decision == audit.Deny && r.Host == "evil.example"
		},
		"release": func(r audit.Record) bool { return r.Kind == audit.KindLease && r.Event == "release" },
		"the folder watch, as its process": func(r audit.Record) bool {
			return r.Kind == audit.KindExec && pool.IsWatch(r.Command)
		},
	}
	for name, match := range want {
		if !slices.ContainsFunc(recs, match) {
			t.Errorf("the lease's trail has no record of %s", name)
		}
	}
	// The watch lists its folder in the sandbox: the trail holds no listing of it per poll.
	for _, r := range recs {
		if r.Kind == audit.KindFile && r.Event == "list" && strings.HasSuffix(r.Path, "/made") {
			t.Errorf("the watched folder was listed through the API: %+v", r)
		}
	}
	for _, r := range recs {
		if r.Lease != created.ID {
			t.Fatalf("a record of another lease in the lease's trail: %+v", r)
		}
	}
}

// TestE2BSDKRunLatency runs the script's bench mode: `true` through the SDK and through
// airlock's own exec endpoint, side by side from one Node process, 5 times each (or
// AIRLOCK_E2B_BENCH_RUNS, for a measurement). It asserts no time; it keeps the bench working.
func TestE2BSDKRunLatency(t *testing.T) {
	n := sharedNode(t)
	runs := 5
	if v, err := strconv.Atoi(os.Getenv("AIRLOCK_E2B_BENCH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	steps := runE2BScript(t, n, 2*time.Minute+time.Duration(runs)*time.Second, "bench", strconv.Itoa(runs), n.client.Addr)
	var b map[string]float64
	if err := json.Unmarshal(steps["bench"], &b); err != nil || b["n"] != float64(runs) || b["sdk_p50"] <= 0 || b["api_p50"] <= 0 {
		t.Fatalf("bench: %s %v", steps["bench"], err)
	}
	if b["api_login_p50"] <= 0 || b["api_process_p50"] <= 0 {
		t.Fatalf("bench: %s", steps["bench"])
	}
	t.Logf("commands.run('true') p50 %.1f ms; airlock's exec p50 %.1f ms, of bash -l -c true %.1f ms, as a background process %.1f ms (%s)",
		b["sdk_p50"], b["api_p50"], b["api_login_p50"], b["api_process_p50"], fmt.Sprint(b))
}
