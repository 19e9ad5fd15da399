package mcpserver_test

import (
	"context"
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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/mcpserver"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

// devMinter mints a token with the allowed hosts, as the dev node's issuer does.
type devMinter struct{ iss *token.DevIssuer }

func (d devMinter) Mint(tenant, task string, allow []string, ttl time.Duration) (string, error) {
	var ss []scope.Scope
	for _, a := range allow {
		s, err := scope.ParseAllow(a)
		if err != nil {
			return "", err
		}
		ss = append(ss, s)
	}
	if task == "" {
		task = fmt.Sprintf("task-%d", time.Now().UnixNano())
	}
	return d.iss.Mint(task, tenant, ss, ttl)
}

// node is an API over a pool whose runtime runs nothing but answers exec with what it was
// asked, exit 0 (or exit 5 for "false"), writing 3 lines one by one.
func node(t *testing.T) (*pooltest.Env, *httptest.Server) {
	t.Helper()
	exec := func(ctx context.Context, _ pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
		if len(req.Cmd) > 0 && req.Cmd[0] == "false" {
			return 5, nil
		}
		for i := range 3 {
			fmt.Fprintf(stdout, "%d: %s\n", i, strings.Join(req.Cmd, " "))
		}
		if stdin != nil {
			b, _ := io.ReadAll(stdin)
			fmt.Fprintf(stderr, "stdin %q", b)
		}
		return 0, nil
	}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 3, MaxTotal: 10}},
		Runtime: func(rt *pooltest.Runtime) { rt.ExecFunc = exec }})
	srv := httptest.NewServer(api.New(api.Config{Pool: e.Manager, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Keys:   map[string]string{api.HashKey("key-acme"): "acme", api.HashKey("key-globex"): "globex"},
		Minter: devMinter{e.Issuer}}))
	t.Cleanup(srv.Close)
	e.MustWarm(t, 3)
	return e, srv
}

func connect(t *testing.T, s *mcpserver.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := s.MCP().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// call calls a tool and decodes its structured result into out; it returns the error text of a
// tool error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %s", name, err, b)
		}
	}
	return ""
}

// TestTools: the tools are listed with their schemas; a sandbox is created, run in (with
// progress), and released; errors say what to do; a session's end releases what it created
// except what it was told to keep.
func TestTools(t *testing.T) {
	e, srv := node(t)
	s := mcpserver.New(mcpserver.Config{Addr: srv.URL, Key: "key-acme", Version: "test"})
	var mu sync.Mutex
	var progress []string
	cs := connect(t, s, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, r.Params.Message)
		mu.Unlock()
	}})
	ctx := context.Background()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		if tool.InputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s has no input schema or description", tool.Name)
		}
	}
	want := []string{"explain", "expose_port", "kill_process", "list_files", "process_output", "read_file", "run",
		"sandbox_create", "sandbox_list", "sandbox_pause", "sandbox_release", "sandbox_resume", "sandbox_snapshot",
		"send_input", "snapshot_delete", "snapshot_list", "start_process", "write_file"}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}

	var sb mcpserver.SandboxOut
	if msg := call(t, cs, "sandbox_create", map[string]any{"allow": []string{"a.example"}}, &sb); msg != "" || !strings.HasPrefix(sb.Lease, "l-") {
		t.Fatalf("sandbox_create: %q %+v", msg, sb)
	}
	var kept mcpserver.SandboxOut
	call(t, cs, "sandbox_create", map[string]any{"allow": []string{"a.example"}, "keep": true}, &kept)

	// run, with progress: each piece of output is a notification as it comes.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"lease": sb.Lease, "command": "make test", "stdin": "in"},
		Meta: mcp.Meta{"progressToken": "p1"}})
	if err != nil || res.IsError {
		t.Fatalf("run: %v %+v", err, res.Content[0])
	}
	var out mcpserver.RunOut
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	if out.ExitCode != 0 || out.Stdout != "0: sh -c make test\n1: sh -c make test\n2: sh -c make test\n" || out.Stderr != `stdin "in"` {
		t.Errorf("run: %+v", out)
	}
	wait.For(t, 10*time.Second, "three progress notifications", func() bool { mu.Lock(); defer mu.Unlock(); return len(progress) >= 3 })
	if call(t, cs, "run", map[string]any{"lease": sb.Lease, "argv": []string{"false"}}, &out); out.ExitCode != 5 {
		t.Errorf("a failing command: %+v", out)
	}
	// A background process's stdin: given at the start (then closed), or kept open and written
	// to later. The fake runtime writes what it read from stdin to stderr once stdin ends.
	stderrOf := func(pid string) string {
		var o api.OutputView
		wait.For(t, 10*time.Second, "process "+pid+" to end", func() bool {
			call(t, cs, "process_output", map[string]any{"lease": sb.Lease, "process": pid, "wait_seconds": 1}, &o)
			return !o.Process.Running
		})
		return o.Stderr
	}
	var p pool.ProcessInfo
	if msg := call(t, cs, "start_process", map[string]any{"lease": sb.Lease, "command": "cat", "stdin": "given\n"}, &p); msg != "" {
		t.Fatalf("start_process with stdin: %s", msg)
	}
	if got := stderrOf(p.ID); got != `stdin "given\n"` {
		t.Errorf("stdin given at the start: %q", got)
	}
	call(t, cs, "start_process", map[string]any{"lease": sb.Lease, "command": "cat", "keep_stdin_open": true}, &p)
	var done mcpserver.Done
	for _, in := range []map[string]any{{"input": "one\n"}, {"input": "two\n", "close": true}} {
		in["lease"], in["process"] = sb.Lease, p.ID
		if msg := call(t, cs, "send_input", in, &done); msg != "" || !done.OK {
			t.Fatalf("send_input %v: %q %+v", in, msg, done)
		}
	}
	if got := stderrOf(p.ID); got != `stdin "one\ntwo\n"` {
		t.Errorf("stdin sent later: %q", got)
	}
	call(t, cs, "start_process", map[string]any{"lease": sb.Lease, "command": "cat"}, &p)
	// Errors an agent can act on.
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run", map[string]any{"lease": "l-nope", "command": "true"}, "create one with sandbox_create"},
		{"run", map[string]any{"lease": sb.Lease}, "a command (a shell line) or argv"},
		{"run", map[string]any{"lease": sb.Lease, "command": "x", "argv": []string{"y"}}, "not both"},
		{"sandbox_create", map[string]any{"template": "nope"}, "pick a template the node has"},
		{"read_file", map[string]any{"lease": sb.Lease, "path": "/etc/passwd"}, "outside the workspace"},
		{"write_file", map[string]any{"lease": sb.Lease, "path": "x", "content": "!!", "encoding": "base64"}, "illegal base64"},
		{"send_input", map[string]any{"lease": sb.Lease, "process": p.ID, "input": "x"}, "takes no input"},
		{"send_input", map[string]any{"lease": sb.Lease, "process": p.ID}, "give input, close, or both"},
	} {
		if msg := call(t, cs, c.tool, c.args, nil); !strings.Contains(msg, c.want) {
			t.Errorf("%s %v: %q, want it to say %q", c.tool, c.args, msg, c.want)
		}
	}
	// A schema violation is refused before the tool runs.
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"lease": 7}}); err == nil {
		if r, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"lease": 7}}); !r.IsError {
			t.Error("a lease that is a number was accepted")
		}
	}

	// Another session (another key) cannot touch this one's sandbox.
	other := mcpserver.New(mcpserver.Config{Addr: srv.URL, Key: "key-globex"})
	ocs := connect(t, other, nil)
	if msg := call(t, ocs, "run", map[string]any{"lease": sb.Lease, "command": "true"}, nil); !strings.Contains(msg, "lease_not_found") {
		t.Errorf("another tenant's session ran in the sandbox: %q", msg)
	}
	ocs.Close()

	// The session ends: what it created goes, except what it was told to keep.
	cs.Close()
	wait.For(t, 10*time.Second, "the session's sandbox to be released", func() bool {
		_, err := e.Manager.Get(ctx, "acme", sb.Lease)
		return err != nil
	})
	if _, err := e.Manager.Get(ctx, "acme", kept.Lease); err != nil {
		t.Errorf("the sandbox created with keep was released: %v", err)
	}
}

// TestHTTPNeedsTheKey: the streamable HTTP transport wants the API key on every request; a
// session opened with one key is not usable with another; with AnyKey, a key the node accepts
// opens a session of its tenant's.
func TestHTTPNeedsTheKey(t *testing.T) {
	_, srv := node(t)
	s := mcpserver.New(mcpserver.Config{Addr: srv.URL, Key: "key-acme", AnyKey: true})
	h := httptest.NewServer(s.HTTPHandler(time.Minute))
	defer h.Close()
	post := func(key, session, body string) *http.Response {
		req, _ := http.NewRequest("POST", h.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, key := range []string{"", "wrong"} {
		if r := post(key, "", init); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("key %q: %d", key, r.StatusCode)
		}
	}
	r := post("key-globex", "", init)
	sid := r.Header.Get("Mcp-Session-Id")
	if r.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("a key the node accepts: %d, session %q", r.StatusCode, sid)
	}
	post("key-globex", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// The session exists once a tool was called in it.
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_list","arguments":{}}}`
	if r := post("key-globex", sid, call); r.StatusCode != http.StatusOK {
		t.Fatalf("a call in the session: %d", r.StatusCode)
	}
	if r := post("key-acme", sid, call); r.StatusCode != http.StatusForbidden {
		t.Errorf("the session used with another key: %d", r.StatusCode)
	}
	// Without AnyKey only the server's own key is taken.
	strict := httptest.NewServer(mcpserver.New(mcpserver.Config{Addr: srv.URL, Key: "key-acme"}).HTTPHandler(time.Minute))
	defer strict.Close()
	req, _ := http.NewRequest("POST", strict.URL, strings.NewReader(init))
	req.Header.Set("Authorization", "Bearer key-globex")
	req.Header.Set("Content-Type", "application/json")
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusUnauthorized {
		t.Errorf("another valid key without AnyKey: %v %v", r.StatusCode, err)
	}
}

// TestReadFileKeepsOnlyWhatItReturns: read_file holds at most max_bytes of a file, and says it
// cut the rest.
func TestReadFileKeepsOnlyWhatItReturns(t *testing.T) {
	_, srv := node(t)
	cs := connect(t, mcpserver.New(mcpserver.Config{Addr: srv.URL, Key: "key-acme"}), nil)
	defer cs.Close()
	var sb mcpserver.SandboxOut
	call(t, cs, "sandbox_create", map[string]any{"allow": []string{"a.example"}}, &sb)
	// The fake runtime answers the download's command with three lines naming it.
	var out mcpserver.ReadOut
	if msg := call(t, cs, "read_file", map[string]any{"lease": sb.Lease, "path": "big.txt", "max_bytes": 10}, &out); msg != "" {
		t.Fatal(msg)
	}
	if len(out.Content) != 10 || !out.Truncated || out.Size <= 10 {
		t.Errorf("read_file with max_bytes 10: %+v", out)
	}
}
