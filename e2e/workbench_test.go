package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/rule"
)

// TestWorkbench drives what an agent does with its sandbox: run commands, move files and
// directories, show a port to a reviewer, and check the node.
func TestWorkbench(t *testing.T) {
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
			cl := &client.Client{Addr: n.client.Addr, Token: n.client.Token}
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

		t.Run("files and directories in and out, never outside the workspace", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			src := t.TempDir() + "/in.bin"
			data := make([]byte, 3<<20)
			rand.Read(data)
			os.WriteFile(src, data, 0o600)
			if _, errs, code := n.cli(t, "cp", src, a.ID+":/workspace/sub/in.bin"); code != 0 {
				t.Fatalf("upload: %s", errs)
			}
			sum := sha256.Sum256(data)
			out, _, code := n.exec(t, a.ID, "sha256sum", "/workspace/sub/in.bin")
			if code != 0 || !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
				t.Fatalf("uploaded file differs: %s", out)
			}
			dst := t.TempDir() + "/out.bin"
			if _, errs, code := n.cli(t, "cp", a.ID+":sub/in.bin", dst); code != 0 {
				t.Fatalf("download: %s", errs)
			}
			if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
				t.Fatal("downloaded file differs")
			}
			// A directory as a tar archive, in and out; an archive with a ../ member is refused.
			if _, errs, code := n.cli(t, "cp", "--tar", tarOf(t, map[string]string{"a.txt": "alpha", "sub/b.txt": "beta"}), a.ID+":/workspace/proj"); code != 0 {
				t.Fatalf("tar upload: %s", errs)
			}
			if out, _, _ := n.exec(t, a.ID, "cat", "/workspace/proj/sub/b.txt"); out != "beta" {
				t.Fatalf("unpacked file: %q", out)
			}
			_, errs, code := n.cli(t, "cp", "--tar", tarOf(t, map[string]string{"../escape.txt": "nope"}), a.ID+":/workspace/proj")
			if code == 0 || !strings.Contains(errs, "..") {
				t.Fatalf("an archive with a ../ member: exit %d %s", code, errs)
			}
			if _, _, code := n.exec(t, a.ID, "test", "-e", "/workspace/escape.txt"); code == 0 {
				t.Fatal("a ../ member escaped the target directory")
			}
			tarOut := t.TempDir() + "/out.tar"
			if _, errs, code := n.cli(t, "cp", "--tar", a.ID+":/workspace/proj", tarOut); code != 0 {
				t.Fatalf("tar download: %s", errs)
			}
			f, _ := os.Open(tarOut)
			names := map[string]bool{}
			tr := tar.NewReader(f)
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				names[strings.TrimPrefix(h.Name, "./")] = true
			}
			f.Close()
			if !names["a.txt"] || !names["sub/b.txt"] {
				t.Fatalf("downloaded archive holds %v", names)
			}
			for _, bad := range []string{a.ID + ":/etc/passwd", a.ID + ":../../etc/passwd", a.ID + ":/workspace/../etc/shadow"} {
				if _, errs, code := n.cli(t, "cp", bad, t.TempDir()+"/x"); code == 0 || !strings.Contains(errs, "outside the workspace") {
					t.Errorf("download of %s: exit %d %s", bad, code, errs)
				}
			}
			refused := func(recs []audit.Record) bool {
				for _, r := range recs {
					if r.Kind == audit.KindFile && r.Decision == audit.Deny && r.Rule == rule.BadRequest && strings.Contains(r.Reason, "outside the workspace") {
						return true
					}
				}
				return false
			}
			if !refused(n.trailUntil(t, a.ID, refused)) {
				t.Error("no deny record, under rule bad-request, of a download outside the workspace")
			}
			want := []string{"file/upload", "file/download", "file/upload-tar", "file/download-tar"}
			kinds := n.logKinds(t, a.ID, want...)
			for _, k := range want {
				if !kinds[k] {
					t.Errorf("logs --lease lacks a %s record (have %v)", k, kinds)
				}
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
			cl := &client.Client{Addr: n.client.Addr, Token: n.client.Token}
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

		t.Run("the workspace is listed, described, made, moved and removed in, and nowhere else", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			cl := &client.Client{Addr: n.client.Addr, Token: n.client.Token}
			ctx := context.Background()
			if _, errs, code := n.exec(t, a.ID, "sh", "-c", "mkdir -p /workspace/src && printf hello > /workspace/src/a.txt && chmod 640 /workspace/src/a.txt && ln -s a.txt /workspace/src/link && printf x > '/workspace/src/odd\nname'"); code != 0 {
				t.Fatalf("setup: %s", errs)
			}
			v, err := cl.ListFiles(ctx, a.ID, "src", 1)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]pool.Entry{}
			for _, e := range v.Entries {
				byName[e.Name] = e
			}
			if e := byName["a.txt"]; e.Type != "file" || e.Size != 5 || e.Mode != "0640" || e.Path != "/workspace/src/a.txt" || time.Since(e.MTime) > time.Hour {
				t.Errorf("a.txt listed as %+v", e)
			}
			if e := byName["link"]; e.Type != "symlink" || e.Link != "a.txt" {
				t.Errorf("link listed as %+v", e)
			}
			if _, ok := byName["odd\nname"]; !ok || len(v.Entries) != 3 {
				t.Errorf("listing: %+v", v.Entries)
			}
			if out, errs, code := n.cli(t, "fs", "ls", a.ID, "--json"); code != 0 || !strings.Contains(out, `"path":"/workspace/src"`) {
				t.Errorf("airlock fs ls --json of the workspace: exit %d %s %s", code, out, errs)
			}
			if _, errs, code := n.cli(t, "fs", "mkdir", a.ID, "deep/er/still"); code != 0 {
				t.Fatalf("mkdir: %s", errs)
			}
			if e, err := cl.Stat(ctx, a.ID, "deep/er/still"); err != nil || e.Type != "dir" {
				t.Errorf("stat of the new folder: %+v %v", e, err)
			}
			if _, errs, code := n.cli(t, "fs", "mv", a.ID, "src/a.txt", "deep/b.txt"); code != 0 {
				t.Fatalf("mv: %s", errs)
			}
			if out, _, _ := n.exec(t, a.ID, "cat", "/workspace/deep/b.txt"); out != "hello" {
				t.Errorf("after the move: %q", out)
			}
			// Refusals, each with a status an agent can act on.
			for _, c := range []struct {
				name string
				err  error
				code string
			}{
				{"stat of a missing file", func() error { _, err := cl.Stat(ctx, a.ID, "nope"); return err }(), "no_such_file"},
				{"a move onto a file", cl.Move(ctx, a.ID, "src/odd\nname", "deep/b.txt", false), "file_exists"},
				{"a move out of the workspace", cl.Move(ctx, a.ID, "deep/b.txt", "/tmp/b.txt", false), "bad_request"},
				{"a listing outside", func() error { _, err := cl.ListFiles(ctx, a.ID, "/etc", 1); return err }(), "bad_request"},
				{"removing the workspace", cl.Remove(ctx, a.ID, "/workspace", true), "bad_request"},
				{"removing a folder that is not empty", cl.Remove(ctx, a.ID, "deep", false), "bad_request"},
			} {
				var ae *client.Error
				if !errors.As(c.err, &ae) || ae.Code != c.code {
					t.Errorf("%s: %v, want %s", c.name, c.err, c.code)
				}
			}
			if out, _, _ := n.exec(t, a.ID, "cat", "/workspace/deep/b.txt"); out != "hello" {
				t.Errorf("a refused move changed the file: %q", out)
			}
			if _, errs, code := n.cli(t, "fs", "rm", a.ID, "deep", "-r"); code != 0 {
				t.Fatalf("rm -r: %s", errs)
			}
			if _, _, code := n.exec(t, a.ID, "test", "-e", "/workspace/deep"); code == 0 {
				t.Error("the folder is still there after rm -r")
			}
			// rm of a symlink removes the link, not what it names.
			n.exec(t, a.ID, "sh", "-c", "mkdir -p /tmp/keep && echo k > /tmp/keep/f && ln -s /tmp/keep /workspace/tolink")
			if err := cl.Remove(ctx, a.ID, "tolink", true); err != nil {
				t.Fatal(err)
			}
			if out, _, _ := n.exec(t, a.ID, "cat", "/tmp/keep/f"); out != "k\n" {
				t.Errorf("removing a symlink to a folder outside reached through it: %q", out)
			}
			// Links that lead out of the workspace: what goes through them is refused, checked in
			// the sandbox where the links are (the path alone looks inside); the link itself is
			// still an entry of the workspace, to describe or remove.
			if _, errs, code := n.exec(t, a.ID, "sh", "-c", "ln -s /etc /workspace/etclink && ln -s /tmp /workspace/tmplink && echo f > /workspace/f"); code != 0 {
				t.Fatalf("setup: %s", errs)
			}
			var sink bytes.Buffer
			for _, c := range []struct {
				name string
				err  error
			}{
				{"a download through a link", func() error { _, err := cl.GetFile(ctx, a.ID, "etclink/passwd", &sink, false); return err }()},
				{"an archive download through a link", func() error { _, err := cl.GetFile(ctx, a.ID, "etclink", &sink, true); return err }()},
				{"an upload through a link", func() error {
					_, err := cl.PutFile(ctx, a.ID, "tmplink/planted", strings.NewReader("x"), false)
					return err
				}()},
				{"a listing through a link", func() error { _, err := cl.ListFiles(ctx, a.ID, "etclink", 1); return err }()},
				{"a folder made through a link", cl.Mkdir(ctx, a.ID, "tmplink/made")},
				{"a move through a link", cl.Move(ctx, a.ID, "f", "tmplink/moved", false)},
				{"a stat through a link", func() error { _, err := cl.Stat(ctx, a.ID, "etclink/passwd"); return err }()},
				{"a remove through a link", cl.Remove(ctx, a.ID, "etclink/hostname", false)},
				{"an archive unpacked where a link leads out", func() error {
					f, err := os.Open(tarOf(t, map[string]string{"tmplink/unpacked": "x"}))
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					_, err = cl.PutFile(ctx, a.ID, "/workspace", f, true)
					return err
				}()},
			} {
				if c.err == nil || !strings.Contains(c.err.Error(), "through a symbolic link, outside the workspace") {
					t.Errorf("%s: %v", c.name, c.err)
				}
			}
			if out, _, _ := n.exec(t, a.ID, "sh", "-c", "ls /tmp/planted /tmp/made /tmp/moved /tmp/unpacked 2>&1; cat /workspace/f"); strings.Contains(out, "/tmp/planted\n") || strings.Contains(out, "/tmp/unpacked\n") || !strings.HasSuffix(out, "f\n") {
				t.Errorf("something went through a link: %q", out)
			}
			if e, err := cl.Stat(ctx, a.ID, "etclink"); err != nil || e.Type != "symlink" || e.Link != "/etc" {
				t.Errorf("the link itself: %+v %v", e, err)
			}
			if err := cl.Remove(ctx, a.ID, "etclink", false); err != nil {
				t.Errorf("removing the link itself: %v", err)
			}
			want := []string{"file/list", "file/stat", "file/mkdir", "file/move", "file/remove"}
			kinds := n.logKinds(t, a.ID, want...)
			for _, k := range want {
				if !kinds[k] {
					t.Errorf("logs --lease lacks a %s record (have %v)", k, kinds)
				}
			}
		})

		t.Run("a background process outlives its call, is read from an offset, signalled, and ends with the lease", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			out, errs, code := n.cli(t, "proc", "start", a.ID, "--", "sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 0.2; done; echo bye >&2; exit 4")
			pid := strings.TrimSpace(out)
			if code != 0 || !strings.HasPrefix(pid, "p-") {
				t.Fatalf("proc start: exit %d %q %s", code, out, errs)
			}
			// The call that started it has ended; another one waits for it and gets its code.
			if _, _, code := n.cli(t, "proc", "wait", a.ID, pid, "--timeout", "30s"); code != 4 {
				t.Errorf("proc wait: exit %d, want the process's 4", code)
			}
			if out, errs, _ := n.cli(t, "proc", "output", a.ID, pid); out != "tick 1\ntick 2\ntick 3\n" || errs != "bye\n" {
				t.Errorf("proc output: %q / %q", out, errs)
			}
			cl := &client.Client{Addr: n.client.Addr, Token: n.client.Token}
			ctx := context.Background()
			o, err := cl.ProcessOutput(ctx, a.ID, pid, client.OutputQuery{StdoutOffset: 7})
			if err != nil || o.Stdout != "tick 2\ntick 3\n" || o.StdoutOffset != 21 {
				t.Errorf("from offset 7: %+v %v", o, err)
			}
			// A long one, and what it starts, end on TERM.
			long, err := cl.StartProcess(ctx, a.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "sleep 300 & sleep 301; echo never"}})
			if err != nil {
				t.Fatal(err)
			}
			if ps, _, _ := n.cli(t, "proc", "ls", a.ID); !strings.Contains(ps, long.ID) || !strings.Contains(ps, "running") {
				t.Errorf("proc ls:\n%s", ps)
			}
			if _, errs, code := n.cli(t, "proc", "kill", a.ID, long.ID); code != 0 {
				t.Fatalf("proc kill: %s", errs)
			}
			w, err := cl.WaitProcess(ctx, a.ID, long.ID, 30*time.Second)
			if err != nil || w.Running {
				t.Fatalf("after TERM: %+v %v", w, err)
			}
			if out, _, _ := n.exec(t, a.ID, "sh", "-c", `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done 2>/dev/null | grep -c '^sleep 30[01]' || true`); strings.TrimSpace(out) != "0" {
				t.Errorf("what the process started outlived TERM: %s", out)
			}
			// The release ends what still runs.
			if _, err := cl.StartProcess(ctx, a.ID, api.ExecRequest{Cmd: []string{"sleep", "600"}}); err != nil {
				t.Fatal(err)
			}
			n.cli(t, "release", a.ID)
			if _, err := cl.Processes(ctx, a.ID); err == nil {
				t.Error("the released lease still lists processes")
			}
			want := []string{"exec/process-start", "exec/process-exit", "exec/process-signal"}
			kinds := n.logKinds(t, a.ID, want...)
			for _, k := range want {
				if !kinds[k] {
					t.Errorf("logs --lease lacks a %s record (have %v)", k, kinds)
				}
			}
		})

		t.Run("a reviewed port is served on its own listener, with a capability, until release", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			if _, errs, code := n.exec(t, a.ID, "sh", "-c",
				"mkdir -p /workspace/site && echo review-me > /workspace/site/index.html && cd /workspace/site && "+
					"nohup python3 -m http.server 8000 >/tmp/site.log 2>&1 & for i in 1 2 3 4 5 6 7 8 9 10; do curl --noproxy '*' -s -o /dev/null http://127.0.0.1:8000/ && exit 0; sleep 0.3; done; exit 1"); code != 0 {
				t.Fatalf("starting the site: %s", errs)
			}
			out, errs, code := n.cli(t, "port", a.ID, "8000")
			if code != 0 {
				t.Fatalf("airlock port: %s", errs)
			}
			u := strings.TrimSpace(out)
			if strings.Contains(u, strings.TrimPrefix(n.client.Addr, "http://")) {
				t.Fatalf("the port shares the API's origin: %s", u)
			}
			jar, _ := cookiejar.New(nil)
			hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
			resp, err := hc.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "review-me\n" {
				t.Fatalf("through the port URL: %d %q", resp.StatusCode, body)
			}
			base, _ := url.Parse(u)
			base.RawQuery = ""
			if resp, err := http.Get(base.String()); err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("without the capability: %v %v", resp, err)
			}
			forged := *base
			forged.RawQuery = "airlock_port=" + strings.Repeat("0", 48)
			if resp, err := http.Get(forged.String()); err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("with a forged capability: %v %v", resp, err)
			}
			if _, errs, code := n.cli(t, "release", a.ID); code != 0 {
				t.Fatalf("release: %s", errs)
			}
			if resp, err := http.Get(u); err == nil {
				resp.Body.Close()
				t.Fatalf("the reviewed port still answers after release: %d", resp.StatusCode)
			}
		})

		t.Run("a lease exposes a bounded number of ports", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			first := ""
			for port := 9001; port <= 9008; port++ {
				out, errs, code := n.cli(t, "port", a.ID, strconv.Itoa(port))
				if code != 0 {
					t.Fatalf("exposing port %d of the default 8: %s", port, errs)
				}
				if port == 9001 {
					first = strings.TrimSpace(out)
				}
			}
			if out, _, code := n.cli(t, "port", a.ID, "9001"); code != 0 || strings.TrimSpace(out) != first {
				t.Errorf("exposing port 9001 again: exit %d %q, want its first URL %q", code, out, first)
			}
			if _, errs, code := n.cli(t, "port", a.ID, "9009"); code == 0 || !strings.Contains(errs, "max_ports_per_lease") {
				t.Fatalf("a ninth port: exit %d %s", code, errs)
			}
		})

		t.Run("airlock verify passes every check", func(t *testing.T) {
			out, errs, code := n.cli(t, "verify")
			if code != 0 || !strings.Contains(out, "checks passed") || strings.Contains(out, "FAIL") {
				t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
			}
			out, _, code = n.cli(t, "verify", "--json")
			var v struct {
				Failed int
				Checks []struct{ Passed bool }
			}
			if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Failed != 0 || len(v.Checks) < 12 {
				t.Fatalf("verify --json: exit %d %s", code, out)
			}
		})
	})
}
