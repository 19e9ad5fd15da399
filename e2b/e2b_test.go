package e2b_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/e2b"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/slots"
)

// minter mints task tokens from host specs with the environment's dev issuer, as the dev node's
// API does.
type minter struct{ e *pooltest.Env }

func (m minter) Mint(tenant, task string, allow []string, ttl time.Duration) (string, error) {
	var scopes []scope.Scope
	for _, a := range allow {
		s, err := scope.ParseAllow(a)
		if err != nil {
			return "", err
		}
		scopes = append(scopes, s)
	}
	if task == "" {
		task = fmt.Sprintf("task-%d", time.Now().UnixNano())
	}
	return m.e.Issuer.Mint(task, tenant, scopes, ttl)
}

// fakeShell stands in for the sandbox: the last argument is the command, and a few are known.
type fakeShell struct {
	mu      sync.Mutex
	release map[string]chan struct{} // marker → closed by a signal
	files   map[string]string        // what the API's file writes wrote, by path
}

func (f *fakeShell) exec(ctx context.Context, _ pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cmd := req.Cmd[len(req.Cmd)-1]
	switch {
	case len(req.Cmd) > 2 && strings.Contains(req.Cmd[2], `cat > "$1"`): // the API's file write
		b, _ := io.ReadAll(stdin)
		f.mu.Lock()
		f.files[cmd] = string(b)
		f.mu.Unlock()
		return 0, nil
	case cmd == "echo hi":
		io.WriteString(stdout, "hi\n")
		return 0, nil
	case cmd == "fail":
		io.WriteString(stdout, "partial\n")
		io.WriteString(stderr, "denied: the gateway says no\n")
		return 3, nil
	case cmd == "env":
		fmt.Fprintf(stdout, "FOO=%s\n", req.Env["FOO"])
		return 0, nil
	case cmd == "cat":
		if stdin == nil {
			return 9, nil
		}
		io.Copy(stdout, stdin)
		return 0, nil
	case cmd == "wait":
		f.mu.Lock()
		ch := make(chan struct{})
		f.release[req.Marker] = ch
		f.mu.Unlock()
		io.WriteString(stdout, "waiting\n")
		select {
		case <-ch:
			io.WriteString(stdout, "released\n")
			return 137, nil
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	return 127, nil
}

func (f *fakeShell) signal(_ context.Context, _ pool.Sandbox, marker, sig string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch := f.release[marker]; ch != nil {
		close(ch)
		delete(f.release, marker)
	}
	return nil
}

type fixture struct {
	srv *httptest.Server
	h   *e2b.Server
	env *pooltest.Env
	sh  *fakeShell
}

func newFixture(t *testing.T) *fixture { return newFixtureMinting(t, true) }

// newFixtureMinting is a fixture whose API mints task tokens or, as every node but `airlock up`,
// mints none.
func newFixtureMinting(t *testing.T, mints bool) *fixture {
	t.Helper()
	sh := &fakeShell{release: map[string]chan struct{}{}, files: map[string]string{}}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 2, MaxTotal: 6}},
		Runtime: func(r *pooltest.Runtime) { r.ExecFunc, r.SignalFunc = sh.exec, sh.signal }})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := api.Config{Pool: e.Manager, Logger: quiet, Keys: map[string]string{api.HashKey("key-acme"): "acme", api.HashKey("key-globex"): "globex"}}
	if mints {
		cfg.Minter = minter{e}
	}
	a := api.New(cfg)
	h, err := e2b.New(e2b.Config{API: a, Template: e.Manager.Template, Secret: []byte("0123456789abcdef0123456789abcdef"), Node: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.MustWarm(t, 2)
	return &fixture{srv: srv, h: h, env: e, sh: sh}
}

// control calls the control plane with key; it returns the status and the decoded body.
func (f *fixture) control(t *testing.T, key, method, path, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
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
		var list []any
		if json.Unmarshal(b, &list) == nil {
			out = map[string]any{"list": list}
		}
	}
	return resp.StatusCode, out
}

// sandbox is one created through the control plane.
type sandbox struct {
	ID, Token string
}

func (f *fixture) create(t *testing.T, key, body string) sandbox {
	t.Helper()
	st, out := f.control(t, key, "POST", "/v2/sandboxes", body)
	if st != http.StatusCreated {
		t.Fatalf("create %s: %d %v", body, st, out)
	}
	if out["envdVersion"] != e2b.EnvdVersion || out["clientID"] != "n1" {
		t.Fatalf("create answered %v", out)
	}
	return sandbox{ID: out["sandboxID"].(string), Token: out["envdAccessToken"].(string)}
}

// envdRequest is a request to the sandbox API as sb's SDK makes it (its id and access token),
// with more headers given in pairs.
func (f *fixture) envdRequest(ctx context.Context, sb sandbox, path string, body io.Reader, hdr ...string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+path, body)
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("X-Access-Token", sb.Token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// envd makes such a request and returns the answer with its whole body.
func (f *fixture) envd(t *testing.T, sb sandbox, path string, body []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(f.envdRequest(context.Background(), sb, path, bytes.NewReader(body), hdr...))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// rpc makes a unary Connect call; it returns the status and the decoded body.
func (f *fixture) rpc(t *testing.T, sb sandbox, method, body string) (int, map[string]any) {
	t.Helper()
	resp, b := f.envd(t, sb, "/"+method, []byte(body), "Content-Type", "application/json")
	var out map[string]any
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// stream makes a server-streaming Connect call and reads its messages until the end of the
// stream, whose error (nil without one) it returns too. until, when set, stops reading early
// once it reports true for a message.
func (f *fixture) stream(t *testing.T, sb sandbox, method, body string, until func(map[string]any) bool) ([]map[string]any, map[string]any) {
	t.Helper()
	var env bytes.Buffer
	env.WriteByte(0)
	binary.Write(&env, binary.BigEndian, uint32(len(body)))
	env.WriteString(body)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(f.envdRequest(ctx, sb, "/"+method, &env, "Content-Type", "application/connect+json"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("%s: %d %s", method, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var msgs []map[string]any
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			t.Fatalf("%s: the stream ended without an end-of-stream envelope after %v: %v", method, msgs, err)
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: message %q: %v", method, b, err)
		}
		if hdr[0] == 2 {
			e, _ := m["error"].(map[string]any)
			return msgs, e
		}
		msgs = append(msgs, m)
		if until != nil && until(m) {
			return msgs, nil
		}
	}
}

// events reads a process stream's messages: its pid, its output in order, and its end.
func events(t *testing.T, msgs []map[string]any) (pid float64, stdout, stderr string, end map[string]any) {
	t.Helper()
	for i, m := range msgs {
		ev := m["event"].(map[string]any)
		switch {
		case ev["start"] != nil:
			if i != 0 {
				t.Fatalf("start is message %d: %v", i, msgs)
			}
			pid = ev["start"].(map[string]any)["pid"].(float64)
		case ev["data"] != nil:
			d := ev["data"].(map[string]any)
			for k, to := range map[string]*string{"stdout": &stdout, "stderr": &stderr} {
				if v, ok := d[k].(string); ok {
					var b []byte
					json.Unmarshal([]byte(`"`+v+`"`), &b)
					*to += string(b)
				}
			}
		case ev["end"] != nil:
			end = ev["end"].(map[string]any)
		}
	}
	if len(msgs) == 0 || pid == 0 {
		t.Fatalf("no start event first: %v", msgs)
	}
	return
}

func TestCommands(t *testing.T) {
	f := newFixture(t)
	sb := f.create(t, "key-acme", `{"templateID":"base","timeout":300,"metadata":{"team":"a"},"envVars":{"FOO":"bar"}}`)

	msgs, rpcErr := f.stream(t, sb, "process.Process/Start", `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}`, nil)
	pid, out, _, end := events(t, msgs)
	if rpcErr != nil || out != "hi\n" || end["exitCode"] != nil && end["exitCode"] != 0.0 || end["exited"] != true || end["error"] != nil {
		t.Fatalf("echo hi: pid %v out %q end %v err %v", pid, out, end, rpcErr)
	}

	msgs, _ = f.stream(t, sb, "process.Process/Start", `{"process":{"cmd":"/bin/bash","args":["-l","-c","fail"]},"stdin":false}`, nil)
	_, out, errOut, end := events(t, msgs)
	if out != "partial\n" || !strings.Contains(errOut, "the gateway says no") || end["exitCode"] != 3.0 || end["error"] != "exit status 3" {
		t.Fatalf("a failing command: out %q err %q end %v", out, errOut, end)
	}

	// The sandbox's variables reach its commands.
	msgs, _ = f.stream(t, sb, "process.Process/Start", `{"process":{"cmd":"/bin/bash","args":["-l","-c","env"]},"stdin":false}`, nil)
	if _, out, _, _ := events(t, msgs); out != "FOO=bar\n" {
		t.Fatalf("envVars did not reach the command: %q", out)
	}

	// stdin: sent with SendInput, closed with CloseStdin, read to its end.
	var cat float64
	msgs, _ = f.stream(t, sb, "process.Process/Start", `{"process":{"cmd":"/bin/bash","args":["-l","-c","cat"]},"stdin":true}`,
		func(m map[string]any) bool { return m["event"].(map[string]any)["start"] != nil })
	cat, _, _, _ = events(t, msgs)
	sel := fmt.Sprintf(`{"process":{"pid":%d}`, int(cat))
	if st, out := f.rpc(t, sb, "process.Process/SendInput", sel+`,"input":{"stdin":"aGVsbG8K"}}`); st != 200 {
		t.Fatalf("SendInput: %d %v", st, out)
	}
	if st, out := f.rpc(t, sb, "process.Process/CloseStdin", sel+`}`); st != 200 {
		t.Fatalf("CloseStdin: %d %v", st, out)
	}
	// The process ended after reading its input; a connection now finds it gone.
	waitEnded(t, f, sb, cat)
	if st, out := f.rpc(t, sb, "process.Process/SendInput", sel+`,"input":{"stdin":"aGVsbG8K"}}`); st != 404 || out["code"] != "not_found" {
		t.Fatalf("SendInput to an ended process: %d %v", st, out)
	}

	// A background process: left by its stream, listed, reconnected to, killed.
	msgs, _ = f.stream(t, sb, "process.Process/Start", `{"process":{"cmd":"/bin/bash","args":["-l","-c","wait"],"cwd":"/workspace"},"stdin":false}`,
		func(m map[string]any) bool { return m["event"].(map[string]any)["start"] != nil })
	bg, _, _, _ := events(t, msgs)
	st, list := f.rpc(t, sb, "process.Process/List", `{}`)
	ps, _ := list["processes"].([]any)
	if st != 200 || len(ps) != 1 || ps[0].(map[string]any)["pid"] != bg || ps[0].(map[string]any)["config"].(map[string]any)["cwd"] != "/workspace" {
		t.Fatalf("List: %d %v (pid %v)", st, list, bg)
	}
	sel = fmt.Sprintf(`{"process":{"pid":%d}`, int(bg))
	done := make(chan []map[string]any)
	following := make(chan struct{})
	go func() {
		var once sync.Once
		msgs, _ := f.stream(t, sb, "process.Process/Connect", sel+`}`, func(map[string]any) bool {
			once.Do(func() { close(following) })
			return false
		})
		done <- msgs
	}()
	// The connection sends its start once it has taken the offsets it follows from: the kill
	// comes after that.
	select {
	case <-following:
	case <-time.After(20 * time.Second):
		t.Fatal("the reconnected stream sent no start within 20s")
	}
	if st, out := f.rpc(t, sb, "process.Process/SendSignal", sel+`,"signal":"SIGNAL_SIGKILL"}`); st != 200 {
		t.Fatalf("SendSignal: %d %v", st, out)
	}
	select {
	case msgs := <-done:
		_, out, _, end := events(t, msgs)
		if strings.Contains(out, "waiting") || !strings.Contains(out, "released") || end["exitCode"] != 137.0 {
			t.Fatalf("Connect: out %q (a connection gets what comes after it) end %v", out, end)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the reconnected stream did not end after the kill")
	}
	if st, out := f.rpc(t, sb, "process.Process/SendSignal", sel+`,"signal":"SIGNAL_SIGKILL"}`); st != 404 || out["code"] != "not_found" {
		t.Fatalf("killing an ended process: %d %v (the SDK's kill answers false on not_found)", st, out)
	}
}

// waitEnded waits (bounded) until pid is no longer listed as running.
func waitEnded(t *testing.T, f *fixture, sb sandbox, pid float64) {
	t.Helper()
	wait.For(t, 10*time.Second, fmt.Sprintf("process %v to be no longer listed", pid), func() bool {
		_, list := f.rpc(t, sb, "process.Process/List", `{}`)
		ps, _ := list["processes"].([]any)
		found := false
		for _, p := range ps {
			found = found || p.(map[string]any)["pid"] == pid
		}
		return !found
	})
}

func TestAccessTokens(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, "key-acme", `{"templateID":"default"}`)
	b := f.create(t, "key-acme", `{"templateID":"default"}`)
	for name, sb := range map[string]sandbox{
		"no token":                 {ID: a.ID},
		"another sandbox's token":  {ID: a.ID, Token: b.Token},
		"a token bit flipped":      {ID: a.ID, Token: a.Token[:len(a.Token)-2] + flip(a.Token[len(a.Token)-2:])},
		"an API key as the token":  {ID: a.ID, Token: "key-acme"},
		"a sandbox id not a lease": {ID: "l-../../v1/leases", Token: a.Token},
	} {
		t.Run(name, func(t *testing.T) {
			st, out := f.rpc(t, sb, "process.Process/List", `{}`)
			if st == 200 {
				t.Fatalf("answered with %v", out)
			}
			_, rpcErr := f.stream(t, sb, "process.Process/Start", `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}`, nil)
			if rpcErr == nil {
				t.Fatal("Start ran")
			}
		})
	}
	// The token opens only while its lease is held.
	if st, _ := f.control(t, "key-acme", "DELETE", "/sandboxes/"+a.ID, ""); st != 204 {
		t.Fatalf("kill: %d", st)
	}
	if st, out := f.rpc(t, a, "process.Process/List", `{}`); st != 404 || out["code"] != "not_found" {
		t.Fatalf("a killed sandbox's token: %d %v", st, out)
	}
	req, _ := http.NewRequest("GET", f.srv.URL+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", a.ID)
	req.Header.Set("X-Access-Token", a.Token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("health of a killed sandbox: %v %v (502 is what the SDK reads as not running)", resp, err)
	}
	// Another tenant's key gets nowhere with the control plane either.
	if st, out := f.control(t, "key-globex", "GET", "/sandboxes/"+b.ID, ""); st != 404 || out["code"] != 404.0 {
		t.Fatalf("another tenant's sandbox: %d %v", st, out)
	}
}

func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func TestControlPlane(t *testing.T) {
	f := newFixture(t)
	if st, out := f.control(t, "", "POST", "/v2/sandboxes", `{}`); st != 401 || out["code"] != 401.0 {
		t.Fatalf("no key: %d %v", st, out)
	}
	if st, out := f.control(t, "wrong", "POST", "/v2/sandboxes", `{}`); st != 401 {
		t.Fatalf("a wrong key: %d %v", st, out)
	}
	for _, c := range []struct{ name, body, want string }{
		{"internet access", `{"allow_internet_access":true}`, "denies every destination by default"},
		{"denyOut", `{"network":{"denyOut":["10.0.0.0/8"]}}`, "denies every destination by default"},
		{"allowOut everything", `{"network":{"allowOut":["0.0.0.0/0"]}}`, "no addresses or ranges"},
		{"allowOut an address", `{"network":{"allowOut":["10.1.2.3"]}}`, "no addresses or ranges"},
		{"allowOut a wildcard", `{"network":{"allowOut":["*"]}}`, "no addresses or ranges"},
		{"public traffic", `{"network":{"allowPublicTraffic":true}}`, "exposed to its tenant only"},
		{"egress proxy", `{"network":{"egressProxy":{"address":"proxy:1080"}}}`, "allowOut only"},
		{"auto pause", `{"autoPause":true}`, "does not pause"},
		{"volumes", `{"volumeMounts":[{"name":"v","path":"/data"}]}`, "no volumes"},
		{"an unknown field", `{"templateID":"default","gpu":true}`, "gpu"},
		{"a secret in envVars by name", `{"envVars":{"GITHUB_TOKEN":"x"}}`, "GITHUB_TOKEN names a secret"},
		{"a secret in envVars by value", `{"envVars":{"NOTE":"ghp_0123456789abcdefghijABCDEFGHIJ012345"}}`, "looks like a GitHub token"},
		{"the proxy overridden", `{"envVars":{"HTTPS_PROXY":""}}`, "set by airlock"},
		{"an unknown template", `{"templateID":"nope"}`, "nope"},
		{"a zero timeout", `{"timeout":0}`, "timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, out := f.control(t, "key-acme", "POST", "/v2/sandboxes", c.body)
			if st < 400 || st >= 500 || out["code"] != float64(st) || !strings.Contains(fmt.Sprint(out["message"]), c.want) {
				t.Fatalf("%s: %d %v, want a refusal saying %q", c.body, st, out, c.want)
			}
		})
	}

	// A task token passed by header binds the lease, and excludes allowOut.
	tok, _ := f.env.Issuer.Mint("task-hdr", "acme", []scope.Scope{{Host: "a.example"}}, time.Hour)
	if st, out := f.control(t, "key-acme", "POST", "/v2/sandboxes", `{"network":{"allowOut":["b.example"]}}`, e2b.TokenHeader, tok); st != 400 || !strings.Contains(fmt.Sprint(out["message"]), "not both") {
		t.Fatalf("token and allowOut: %d %v", st, out)
	}
	st, out := f.control(t, "key-acme", "POST", "/v2/sandboxes", `{"timeout":60,"metadata":{"team":"a"}}`, e2b.TokenHeader, tok)
	if st != 201 {
		t.Fatalf("create with a token: %d %v", st, out)
	}
	id := out["sandboxID"].(string)
	if l, err := f.env.Manager.Get(context.Background(), "acme", id); err != nil || l.Task != "task-hdr" || time.Until(l.Expires) > 61*time.Second {
		t.Fatalf("the lease: %+v %v", l, err)
	}
	other := f.create(t, "key-acme", `{"metadata":{"team":"b"},"network":{"allowOut":["pypi.org"]}}`)

	st, out = f.control(t, "key-acme", "GET", "/sandboxes/"+id, "")
	if st != 200 || out["state"] != "running" || out["metadata"].(map[string]any)["team"] != "a" || out["templateID"] != "default" {
		t.Fatalf("get: %d %v", st, out)
	}
	st, out = f.control(t, "key-acme", "GET", "/v2/sandboxes?metadata=team%3Da", "")
	if list := out["list"].([]any); st != 200 || len(list) != 1 || list[0].(map[string]any)["sandboxID"] != id {
		t.Fatalf("list by metadata: %d %v", st, out)
	}
	if st, out := f.control(t, "key-acme", "GET", "/v2/sandboxes?state=paused", ""); st != 200 || len(out["list"].([]any)) != 0 {
		t.Fatalf("list paused: %d %v", st, out)
	}
	if st, out := f.control(t, "key-globex", "GET", "/v2/sandboxes", ""); st != 200 || len(out["list"].([]any)) != 0 {
		t.Fatalf("another tenant lists: %d %v", st, out)
	}
	if st, _ := f.control(t, "key-acme", "POST", "/sandboxes/"+id+"/timeout", `{"timeout":600}`); st != 204 {
		t.Fatalf("timeout: %d", st)
	}
	if l, _ := f.env.Manager.Get(context.Background(), "acme", id); time.Until(l.Expires) < 590*time.Second {
		t.Fatalf("setTimeout did not extend the lease: ends in %s", time.Until(l.Expires))
	}
	// This node keeps no snapshots: a pause is refused saying so (pause_test.go pauses).
	if st, out := f.control(t, "key-acme", "POST", "/sandboxes/"+id+"/pause", `{}`); st != 501 || !strings.Contains(fmt.Sprint(out["message"]), "keeps no snapshots") {
		t.Fatalf("pause: %d %v", st, out)
	}
	if st, out := f.control(t, "key-acme", "POST", "/v2/sandboxes/"+other.ID+"/connect", `{"timeout":120}`); st != 200 || out["envdAccessToken"] == "" {
		t.Fatalf("connect: %d %v", st, out)
	}
	if st, out := f.control(t, "key-acme", "POST", "/sandboxes/"+id+"/snapshots", `{}`); st != 501 || !strings.Contains(fmt.Sprint(out["message"]), "POST /v1/leases/{id}/snapshots") {
		t.Fatalf("snapshot: %d %v", st, out)
	}
	if st, _ := f.control(t, "key-acme", "DELETE", "/sandboxes/"+id, ""); st != 204 {
		t.Fatalf("kill: %d", st)
	}
	if st, out := f.control(t, "key-acme", "DELETE", "/sandboxes/"+id, ""); st != 404 || out["code"] != 404.0 {
		t.Fatalf("kill twice: %d %v (the SDK's kill answers false on code 404)", st, out)
	}
}

func TestConnectProtocol(t *testing.T) {
	f := newFixture(t)
	sb := f.create(t, "key-acme", `{}`)
	post := func(method, ctype, body string, hdr ...string) (*http.Response, []byte) {
		return f.envd(t, sb, "/"+method, []byte(body), append([]string{"Content-Type", ctype}, hdr...)...)
	}
	for _, c := range []struct {
		name, method, ctype, body string
		hdr                       []string
		status                    int
		want                      string
	}{
		{"binary protobuf", "process.Process/List", "application/proto", "", nil, 415, "JSON codec only"},
		{"an unknown field", "process.Process/List", "application/json", `{"all":true}`, nil, 400, "all"},
		{"not JSON", "filesystem.Filesystem/Stat", "application/json", `{"path":`, nil, 400, "invalid_argument"},
		{"root", "filesystem.Filesystem/Stat", "application/json", `{"path":"x"}`, []string{"Authorization", "Basic cm9vdDo="}, 403, "as root"},
		{"another user", "filesystem.Filesystem/Stat", "application/json", `{"path":"x"}`, []string{"Authorization", "Basic YWxpY2U6"}, 400, "one user"},
		{"a bad timeout", "process.Process/List", "application/json", `{}`, []string{"Connect-Timeout-Ms", "soon"}, 400, "Connect-Timeout-Ms"},
		{"a tag selector", "process.Process/SendInput", "application/json", `{"process":{"tag":"x"},"input":{"stdin":""}}`, nil, 400, "by pid"},
		{"an unknown signal", "process.Process/SendSignal", "application/json", `{"process":{"pid":1},"signal":"SIGNAL_SIGSTOP"}`, nil, 400, "SIGNAL_SIGKILL"},
		{"another port", "process.Process/List", "application/json", `{}`, []string{"E2b-Sandbox-Port", "8080"}, 501, "/ports"},
		{"a client stream", "process.Process/StreamInput", "application/json", `{}`, nil, 501, "SendInput"},
		{"an unknown method", "process.Process/Exec", "application/json", `{}`, nil, 404, "no POST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, b := post(c.method, c.ctype, c.body, c.hdr...)
			if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
				t.Fatalf("%d %s, want %d saying %q", resp.StatusCode, b, c.status, c.want)
			}
		})
	}
	// A stream's request must be one plain envelope; errors come in the end of the stream.
	for name, env := range map[string][]byte{
		"compressed":  append([]byte{1, 0, 0, 0, 2}, "{}"...),
		"cut short":   {0, 0, 0, 0, 9, '{'},
		"too large":   {0, 0xff, 0xff, 0xff, 0xff},
		"end flagged": append([]byte{2, 0, 0, 0, 2}, "{}"...),
	} {
		t.Run("envelope "+name, func(t *testing.T) {
			resp, b := post("process.Process/Start", "application/connect+json", string(env))
			if resp.StatusCode != 200 || len(b) < 5 || b[0] != 2 || !bytes.Contains(b, []byte(`"error"`)) {
				t.Fatalf("%d %q: want an end-of-stream envelope with an error", resp.StatusCode, b)
			}
		})
	}
	// Connect-Timeout-Ms bounds a stream: its end says the deadline passed, and the process,
	// like one whose client went away, keeps running for a later Connect.
	var env bytes.Buffer
	body := `{"process":{"cmd":"/bin/bash","args":["-l","-c","wait"]},"stdin":false}`
	env.WriteByte(0)
	binary.Write(&env, binary.BigEndian, uint32(len(body)))
	env.WriteString(body)
	_, b := post("process.Process/Start", "application/connect+json", env.String(), "Connect-Timeout-Ms", "300")
	if !bytes.Contains(b, []byte(`"start"`)) || !bytes.Contains(b, []byte(`"deadline_exceeded"`)) {
		t.Fatalf("a stream past its timeout: %q", b)
	}
	if _, list := f.rpc(t, sb, "process.Process/List", `{}`); len(list["processes"].([]any)) != 1 {
		t.Fatalf("the process did not outlive its stream: %v", list)
	}
}

// Where the node mints no task tokens, a create without one is refused by the API's own code
// (token_required), and the SDK's user is told where the token goes.
func TestCreateWithoutATokenWhereNoneIsMinted(t *testing.T) {
	f := newFixtureMinting(t, false)
	st, out := f.control(t, "key-acme", "POST", "/v2/sandboxes", `{}`)
	if msg, _ := out["message"].(string); st != http.StatusBadRequest || !strings.Contains(msg, e2b.TokenHeader) {
		t.Fatalf("create without a token: %d %v", st, out)
	}
}

// Uploads: multipart (each part's filename its path) and octet-stream, either gzipped; another
// encoding, a missing path and another user are refused.
func TestUploads(t *testing.T) {
	f := newFixture(t)
	sb := f.create(t, "key-acme", `{}`)
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		zw := gzip.NewWriter(&out)
		zw.Write(b)
		zw.Close()
		return out.Bytes()
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for _, name := range []string{"a/one.txt", "two.txt"} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+name+`"`)
		w, _ := mw.CreatePart(h)
		io.WriteString(w, "body of "+name)
	}
	mw.Close()
	post := func(query, ctype, enc string, body []byte) (int, string) {
		hdr := []string{"Content-Type", ctype}
		if enc != "" {
			hdr = append(hdr, "Content-Encoding", enc)
		}
		resp, b := f.envd(t, sb, "/files"+query, body, hdr...)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		name, query, ctype, enc string
		body                    []byte
		status                  int
		want                    string
	}{
		{"multipart", "", mw.FormDataContentType(), "", form.Bytes(), 200, "one.txt"},
		{"multipart, gzipped", "", mw.FormDataContentType(), "gzip", gz(form.Bytes()), 200, "two.txt"},
		{"octet-stream, gzipped", "?path=z.txt", "application/octet-stream", "gzip", gz([]byte("zipped")), 200, "z.txt"},
		{"another encoding", "?path=z.txt", "application/octet-stream", "br", []byte("x"), 415, "not gzip"},
		{"not gzip after all", "?path=z.txt", "application/octet-stream", "gzip", []byte("plain"), 400, "gzip"},
		{"octet-stream without a path", "", "application/octet-stream", "", []byte("x"), 400, "?path="},
		{"as root", "?path=r.txt&username=root", "application/octet-stream", "", []byte("x"), 403, "root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if st, body := post(c.query, c.ctype, c.enc, c.body); st != c.status || !strings.Contains(body, c.want) {
				t.Fatalf("%d %s, want %d saying %q", st, body, c.status, c.want)
			}
		})
	}
	f.sh.mu.Lock()
	defer f.sh.mu.Unlock()
	for p, want := range map[string]string{"/workspace/a/one.txt": "body of a/one.txt", "/workspace/two.txt": "body of two.txt", "/workspace/z.txt": "zipped"} {
		if got := f.sh.files[p]; got != want {
			t.Errorf("%s holds %q, want %q (all: %q)", p, got, want, f.sh.files)
		}
	}
}

// The E2B listener is bounded as the API's is (the node serves it on a slots.Server): a call
// whose body does not come whole in time is cut off with 408, while a file upload flows for as
// long as its bytes keep coming.
func TestSlowBodiesOnTheListener(t *testing.T) {
	f := newFixture(t)
	sb := f.create(t, "key-acme", `{}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := slots.NewServer(ln, slots.ServerConfig{Handler: f.h, Refuse: f.h.Refuse, Setting: "e2b",
		Conns:    slots.Conns{Max: 8, PerAddress: 8},
		Timeouts: slots.Timeouts{Header: 3 * time.Second, Body: 300 * time.Millisecond, Stall: 3 * time.Second, Idle: 3 * time.Second}})
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	send := func(path, ctype string, size int, first string) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: e2b\r\nE2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
			path, sb.ID, sb.Token, ctype, size, first)
		return c
	}
	answer := func(c net.Conn, what string) (int, string) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("waiting 10s for the answer to %s: %v", what, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	up := send("/files?path=slow.txt", "application/octet-stream", 4, "a")
	call := send("/process.Process/List", "application/json", 1000, "{")
	if st, body := answer(call, "a call whose body never comes"); st != http.StatusRequestTimeout || !strings.Contains(body, "e2b.timeouts.body") {
		t.Fatalf("a slow call: %d %q; want 408 naming e2b.timeouts.body", st, body)
	}
	// The body timeout has passed for the upload too; it goes on as its bytes come.
	io.WriteString(up, "bcd")
	if st, body := answer(up, "the upload"); st != http.StatusOK || !strings.Contains(body, "slow.txt") {
		t.Fatalf("an upload that moved past the body timeout: %d %q; want it written", st, body)
	}
	f.sh.mu.Lock()
	defer f.sh.mu.Unlock()
	if got := f.sh.files["/workspace/slow.txt"]; got != "abcd" {
		t.Fatalf("the upload wrote %q", got)
	}
}
