package e2e

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/pool"
)

// TestExec drives the commands an agent runs in its sandbox: stdin, output and exit codes
// streamed; what it writes runs, in the workspace and in /tmp; common clients pointed at the
// gateway and its CA; env and workdir per command; a timeout that ends all the command started;
// a terminal of the size asked for, resized.
func TestExec(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		t.Run("exec streams stdin, output and exit codes", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			big := strings.Repeat("x", 3<<20)
			for _, c := range []struct {
				name, stdin string
				cmd         []string
				out         string
				code        int
			}{
				{"stdin", "hello\n", []string{"tr", "a-z", "A-Z"}, "HELLO\n", 0},
				{"3 MiB of stdin", big, []string{"wc", "-c"}, strconv.Itoa(len(big)) + "\n", 0},
				{"20 MB of output", "", []string{"head", "-c", "20000000", "/dev/zero"}, strings.Repeat("\x00", 20000000), 0},
				{"exit code", "", []string{"sh", "-c", "exit 7"}, "", 7},
			} {
				args := []string{"exec", a.ID, "--timeout", "60s"}
				if c.stdin != "" {
					args = append(args, "-i")
				}
				out, errs, code := n.cliStdin(t, strings.NewReader(c.stdin), append(append(args, "--"), c.cmd...)...)
				if code != c.code || out != c.out {
					t.Errorf("%s: exit %d (want %d), %d bytes of output (want %d): %.80q %s", c.name, code, c.code, len(out), len(c.out), out, errs)
				}
			}
		})

		t.Run("what the agent writes runs, in the workspace and in /tmp", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			for _, c := range []struct{ name, script, want string }{
				{"a shebang script", `printf '#!/bin/sh\necho hi from a script\n' > x.sh && chmod +x x.sh && ./x.sh`, "hi from a script"},
				{"a copied binary", `cp /bin/echo ./e && ./e hi from a binary`, "hi from a binary"},
				{"a binary in /tmp", `cp /bin/echo /tmp/e && /tmp/e hi from tmp`, "hi from tmp"},
				{"a tool a build made, run by the next step", `mkdir -p bin && printf '#!/usr/bin/env python3\nprint("built")\n' > bin/tool && chmod +x bin/tool && PATH=$PWD/bin:$PATH tool`, "built"},
			} {
				out, errs, code := n.exec(t, a.ID, "sh", "-c", c.script)
				if code != 0 || strings.TrimSpace(out) != c.want {
					t.Errorf("%s: exit %d %q %s", c.name, code, out, errs)
				}
			}
			// Still nosuid and nodev.
			out, _, _ := n.exec(t, a.ID, "sh", "-c", "grep -E ' (/workspace|/tmp) ' /proc/mounts")
			for _, l := range lines(out) {
				// gVisor lists its tmpfs as "rw,nosuid" whatever else it was given; the scripts
				// above are what show it executable.
				nodev := strings.Contains(l, "nodev") || n.template == "gvisor"
				if !strings.Contains(l, "nosuid") || !nodev || strings.Contains(l, "noexec") {
					t.Errorf("mount %q: want exec, nosuid, nodev", l)
				}
			}
			if len(lines(out)) != 2 {
				t.Errorf("workspace and /tmp mounts: %q", out)
			}
		})

		t.Run("common clients are pointed at the gateway and its CA", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			out, _, _ := n.exec(t, a.ID, "sh", "-c", "env; test -s /etc/airlock/ca-truststore.p12 && echo truststore-present")
			for _, want := range []string{"NODE_USE_ENV_PROXY=1", "PIP_CERT=/etc/airlock/ca-bundle.pem", "NPM_CONFIG_CAFILE=", "CARGO_HTTP_CAINFO=",
				"AWS_CA_BUNDLE=", "GIT_SSL_CAINFO=", "JAVA_TOOL_OPTIONS=", "https.proxyPort=3128", "truststore-present"} {
				if !strings.Contains(out, want) {
					t.Errorf("the sandbox lacks %q", want)
				}
			}
		})

		t.Run("exec takes env and workdir per command, through the Go client", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			n.exec(t, a.ID, "mkdir", "-p", "/workspace/wd")
			cl := n.goClient()
			var stdout, stderr bytes.Buffer
			code, err := cl.Exec(context.Background(), a.ID, api.ExecRequest{Cmd: []string{"sh", "-c", `echo "$GREETING from $(pwd)" >&2`},
				Env: map[string]string{"GREETING": "hi"}, Workdir: "/workspace/wd"}, &stdout, &stderr)
			if err != nil || code != 0 || stderr.String() != "hi from /workspace/wd\n" || stdout.Len() != 0 {
				t.Fatalf("env/workdir/stderr: %d %v out=%q err=%q", code, err, stdout.String(), stderr.String())
			}
		})

		t.Run("a timeout kills the command and everything it started", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			start := time.Now()
			_, errs, code := n.cli(t, "exec", a.ID, "--timeout", "1s", "--", "sh", "-c", "sleep 300 & sleep 300")
			if code == 0 || !strings.Contains(errs, "timed out") || time.Since(start) > 20*time.Second {
				t.Fatalf("timeout: exit %d after %s: %s", code, time.Since(start), errs)
			}
			var out string
			if err := waitUntil(5*time.Second, "the timed-out command's processes to be gone and reaped", func() bool {
				out, _, _ = n.exec(t, a.ID, "ps", "-eo", "stat,args")
				return !strings.Contains(out, "sleep 300") && !strings.Contains(out, "defunct")
			}); err != nil {
				t.Fatalf("%v; processes left:\n%s", err, out)
			}
		})

		t.Run("a command whose caller goes away is killed with everything it started", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			n.abandonExec(t, a.ID, "sleep 301 & echo started; sleep 301")
			var ps string
			if err := waitUntil(10*time.Second, "the abandoned command's processes to be gone and reaped", func() bool {
				ps, _, _ = n.exec(t, a.ID, "ps", "-eo", "stat,args")
				return !strings.Contains(ps, "sleep 301") && !strings.Contains(ps, "defunct")
			}); err != nil {
				t.Fatalf("%v; processes left:\n%s", err, ps)
			}
		})

		t.Run("a command runs on a terminal of the size asked for, resized, with its input", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			if out, errs, code := n.cli(t, "exec", a.ID, "-t", "--", "tty"); code != 0 || !strings.HasPrefix(out, "/dev/pts/") {
				t.Errorf("exec -t tty: exit %d %q %s", code, out, errs)
			}
			if out, _, _ := n.cli(t, "exec", a.ID, "tty"); !strings.Contains(out, "not a tty") {
				t.Errorf("exec tty without -t: %q", out)
			}
			cl := n.goClient()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			in, typed := io.Pipe()
			resize := make(chan pool.TermSize, 1)
			var out syncBuffer
			script := `stty size; echo "TERM=$TERM"; read a; i=0; while [ "$(stty size)" = "30 100" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; stty size; echo "[$a]"; exit 3`
			done := make(chan struct{})
			var code int
			var err error
			go func() {
				defer close(done)
				code, err = cl.ExecTTY(ctx, a.ID, api.ExecRequest{Cmd: []string{"sh", "-c", script}, Rows: 30, Cols: 100}, in, resize, &out)
			}()
			if err := waitUntil(20*time.Second, "the terminal to report its first size", func() bool { return strings.Contains(out.String(), "30 100") }); err != nil {
				t.Fatalf("%v; it showed %q", err, out.String())
			}
			io.WriteString(typed, "hi there\n")
			resize <- pool.TermSize{Rows: 40, Cols: 120}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the terminal command did not end; it wrote:\n%s", out.String())
			}
			got := out.String()
			if err != nil || code != 3 || !strings.Contains(got, "TERM=xterm-256color") || !strings.Contains(got, "40 120") || !strings.Contains(got, "[hi there]") {
				t.Errorf("exit %d, %v; the terminal showed:\n%q", code, err, got)
			}
		})
	})
}
