package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// mcpSDKVersion is the MCP TypeScript SDK the e2e client runs on, installed from the npm
// registry once into the cache.
const mcpSDKVersion = "1.32.2"

// mcpClientDir installs the official MCP TypeScript SDK (once, cached outside the checkout) and
// puts the test's client script beside it, returning the script's path.
func mcpClientDir(t *testing.T) string {
	return npmScript(t, "@modelcontextprotocol/sdk", mcpSDKVersion, "testdata/mcp/client.mjs")
}

// npmScript installs pkg@version from the npm registry (once, cached outside the checkout, in a
// folder of its own per package and version) and puts the script beside it, returning the
// script's path there.
func npmScript(t *testing.T, pkg, version, script string) string {
	t.Helper()
	cache := os.Getenv("AIRLOCK_CACHE")
	if cache == "" {
		cache = "/var/cache/airlock"
	}
	dir := filepath.Join(cache, "npm", strings.NewReplacer("@", "", "/", "-").Replace(pkg)+"-"+version)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
		os.MkdirAll(dir, 0o755)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", pkg+"@"+version)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("installing %s@%s with npm (scripts/deps.sh installs npm): %v\n%s", pkg, version, err, out)
		}
	}
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, filepath.Base(script))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// transcript reads a Node script's output, one JSON line {step, value} per step, into the
// steps by name; lines that are not steps are skipped.
func transcript(out []byte) map[string]json.RawMessage {
	steps := map[string]json.RawMessage{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s mcpStep
		if json.Unmarshal(sc.Bytes(), &s) == nil {
			steps[s.Step] = s.Value
		}
	}
	return steps
}

// mcpStep is one line of the client's transcript.
type mcpStep struct {
	Step  string          `json:"step"`
	Value json.RawMessage `json:"value"`
}

type mcpResult struct {
	IsError    bool           `json:"isError"`
	Structured map[string]any `json:"structured"`
	Text       string         `json:"text"`
}

// TestMCPWithTheTypeScriptSDK: an MCP client no one here wrote (the official TypeScript SDK)
// drives `airlock mcp` over stdio and over streamable HTTP: it lists the tools, creates and
// lists sandboxes, runs commands (with progress), is refused a host and told why and what would
// allow it, writes, reads and lists files, runs what it wrote, runs a server in the background,
// reads its output on from offsets, opens its exposed port as a reviewer would and kills it,
// gets an error it can act on, and releases; the session's end releases what it left.
func TestMCPWithTheTypeScriptSDK(t *testing.T) {
	n := sharedNode(t)
	script := mcpClientDir(t)
	env := append(os.Environ(), "AIRLOCK_ADDR="+n.client.Addr, "AIRLOCK_TOKEN="+n.client.Token)
	bin, _ := filepath.Abs(airlockBin)
	transports := map[string]func(t *testing.T) []string{
		"stdio": func(t *testing.T) []string { return []string{"stdio", bin} },
		"http": func(t *testing.T) []string {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			srv := exec.Command(bin, "mcp", "--http", addr)
			srv.Env = env
			var log syncBuffer
			srv.Stdout, srv.Stderr = &log, &log
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Process.Signal(os.Interrupt); srv.Wait() })
			eventually(t, 10*time.Second, "airlock mcp --http to listen", func() bool {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					c.Close()
				}
				return err == nil
			})
			return []string{"http", "http://" + addr + "/", n.client.Token}
		},
	}
	for _, name := range []string{"stdio", "http"} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", append([]string{script}, transports[name](t)...)...)
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			steps := transcript(out)
			if err != nil || steps["error"] != nil {
				t.Fatalf("the TypeScript client: %v %s\n%s\n%s", err, steps["error"], out, stderr.String())
			}
			t.Logf("transcript:\n%s", out)
			res := func(step string) mcpResult {
				var r mcpResult
				if err := json.Unmarshal(steps[step], &r); err != nil {
					t.Fatalf("step %s: %v (%s)", step, err, steps[step])
				}
				return r
			}
			var tools []string
			json.Unmarshal(steps["tools"], &tools)
			want := []string{"explain", "expose_port", "kill_process", "list_files", "process_output", "read_file", "run",
				"sandbox_create", "sandbox_list", "sandbox_pause", "sandbox_release", "sandbox_resume", "sandbox_snapshot",
				"send_input", "snapshot_delete", "snapshot_list", "start_process", "write_file"}
			if !slices.Equal(tools, want) {
				t.Errorf("tools %v", tools)
			}
			lease, _ := res("sandbox_create").Structured["lease"].(string)
			if !strings.HasPrefix(lease, "l-") {
				t.Fatalf("sandbox_create: %+v", res("sandbox_create"))
			}
			if r := res("sandbox_list"); !strings.Contains(fmt.Sprint(r.Structured["sandboxes"]), lease) {
				t.Errorf("sandbox_list does not name %s: %+v", lease, r)
			}
			if r := res("run"); r.IsError || r.Structured["exit_code"] != 3.0 || r.Structured["stdout"] != "one\n" || r.Structured["stderr"] != "two\n" {
				t.Errorf("run: %+v", r)
			}
			var progress []string
			json.Unmarshal(steps["progress"], &progress)
			if all := strings.Join(progress, ""); !strings.Contains(all, "one") || !strings.Contains(all, "two") {
				t.Errorf("no output came as progress: %q", progress)
			}
			if r := res("run_allowed"); !strings.Contains(fmt.Sprint(r.Structured["stdout"]), "whoami ok") {
				t.Errorf("an allowed request: %+v", r)
			}
			denied := res("run_denied")
			if !strings.Contains(fmt.Sprint(denied.Structured["stdout"]), "denied by rule scope-miss") {
				t.Errorf("a denied request: %+v", denied)
			}
			ex := res("explain")
			if ex.Structured["decision"] != "deny" || ex.Structured["rule"] != "scope-miss" || fmt.Sprint(ex.Structured["hint"]) == "" {
				t.Errorf("explain: %+v", ex)
			}
			// The refusal inside the sandbox and the explanation give the same reason.
			if reason := fmt.Sprint(ex.Structured["reason"]); !strings.Contains(fmt.Sprint(denied.Structured["stdout"]), reason) {
				t.Errorf("the sandbox was told %q; explain says %q", denied.Structured["stdout"], reason)
			}
			if r := res("read_file"); r.Structured["content"] != "print('hello from ts')\n" {
				t.Errorf("read_file: %+v", r)
			}
			if r := res("list_files"); !strings.Contains(fmt.Sprint(r.Structured["entries"]), "/workspace/src/hello.py") {
				t.Errorf("list_files: %+v", r)
			}
			if r := res("run_written"); r.Structured["stdout"] != "hello from ts\n" {
				t.Errorf("running what was written: %+v", r)
			}
			if r := res("process_output"); !strings.HasPrefix(fmt.Sprint(r.Structured["stdout"]), "serving\n") || r.Structured["process"].(map[string]any)["running"] != true {
				t.Errorf("process_output of a running server: %+v", r)
			}
			var listening string
			json.Unmarshal(steps["process_listening"], &listening)
			if !strings.Contains(listening, "Serving HTTP on 0.0.0.0 port 8000") {
				t.Errorf("reading the server's output on from offsets: %q", listening)
			}
			if u := fmt.Sprint(res("expose_port").Structured["url"]); !strings.HasPrefix(u, "http") {
				t.Errorf("expose_port: %+v", res("expose_port"))
			}
			var page struct {
				First, Status int
				Body          string
			}
			json.Unmarshal(steps["port_fetch"], &page)
			if page.First != http.StatusSeeOther || page.Status != http.StatusOK || !strings.Contains(page.Body, "src/") {
				t.Errorf("the exposed port, opened as a reviewer would: %+v", page)
			}
			if r := res("kill_process"); r.IsError {
				t.Errorf("kill_process: %+v", r)
			}
			if r := res("process_ended"); r.Structured["process"].(map[string]any)["running"] != false {
				t.Errorf("the killed server still runs: %+v", r)
			}
			if r := res("bad_lease"); !r.IsError || !strings.Contains(r.Text, "sandbox_create") {
				t.Errorf("a lease that is not there: %+v", r)
			}
			if r := res("sandbox_release"); r.IsError {
				t.Errorf("sandbox_release: %+v", r)
			}
			if _, _, code := n.exec(t, lease, "true"); code == 0 {
				t.Error("the released sandbox still runs commands")
			}
			left, _ := res("left").Structured["lease"].(string)
			eventually(t, 30*time.Second, "the session's end to release the sandbox it left", func() bool {
				_, _, code := n.cli(t, "exec", left, "--", "true")
				return code != 0
			})
		})
	}
}
