package scripts

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
)

// A stand-in for dockerd: like the real one (a Go program calling signal.Notify), it stops on
// SIGINT even when started with SIGINT ignored, which a backgrounded command of a script is. As
// the real one does, it reads the runtimes of DOCKER_DAEMON_JSON (when set) at start and again
// on SIGHUP, and lists them for the stand-in docker's info.
const stubDockerd = `#!/usr/bin/env python3
import json, os, signal, sys, time
d = os.environ["STUB_DIR"]
open(os.environ["DOCKER_PIDFILE"], "w").write(str(os.getpid()))
def load():
    conf = os.environ.get("DOCKER_DAEMON_JSON")
    if conf:
        names = ["runc"] + sorted(json.load(open(conf)).get("runtimes", {}))
        open(os.path.join(d, "runtimes"), "w").write(" ".join(names) + "\n")
def stop(sig, frame):
    open(os.path.join(d, "signals"), "a").write("INT\n")
    sys.exit(0)
def hup(sig, frame):
    open(os.path.join(d, "signals"), "a").write("HUP\n")
    load()
load()
signal.signal(signal.SIGHUP, hup)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, lambda s, f: sys.exit(0))
lifetime = float(os.environ.get("STUB_LIFETIME", "0"))
start = time.time()
if lifetime == 0:
    open(os.path.join(d, "ready"), "w").write(str(start))
while lifetime == 0 or time.time() - start < lifetime:
    time.sleep(0.05)
`

// stubs writes the stand-ins and returns the environment that points engine.sh at them.
func stubs(t *testing.T) (dir string, env []string) {
	t.Helper()
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, "dockerd"), []byte(stubDockerd), 0o755)
	os.WriteFile(filepath.Join(dir, "docker"), []byte("#!/bin/sh\n[ \"$1\" = info ] && [ -e \""+dir+"/ready\" ] || exit 1\ncat \""+dir+"/runtimes\" 2>/dev/null\nexit 0\n"), 0o755)
	env = append(os.Environ(), "STUB_DIR="+dir, "DOCKER="+filepath.Join(dir, "docker"), "DOCKERD="+filepath.Join(dir, "dockerd"),
		"DOCKER_PIDFILE="+filepath.Join(dir, "docker.pid"), "DOCKERD_LOG="+filepath.Join(dir, "dockerd.log"))
	return dir, env
}

func pidOf(t *testing.T, dir string) int {
	t.Helper()
	return pidFile(t, filepath.Join(dir, "docker.pid"))
}

// alive and kill take only a real process's pid: signalling pid 0 or -1 (an empty or unread
// pid file) would reach the test's own process group or every process, the CI run among them.
func alive(pid int) bool { return pid > 1 && syscall.Kill(pid, 0) == nil }

func kill(pid int) {
	if pid > 1 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// pidFile waits (bounded) for a stand-in to write its pid file, and fails the test without one.
func pidFile(t *testing.T, path string) int {
	t.Helper()
	pid := 0
	if err := wait.Until(10*time.Second, "a pid in "+path, func() bool {
		b, _ := os.ReadFile(path)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 1
	}); err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitGone waits (bounded) for pid to exit and reports whether it did.
func waitGone(pid int, within time.Duration) bool {
	return wait.Until(within, fmt.Sprintf("pid %d to exit", pid), func() bool {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // reap it if it is our child
		return !alive(pid)
	}) == nil
}

// The engine make started itself survives a Ctrl-C at the terminal: the signal goes to the
// whole foreground process group, and the engine is not in it.
func TestEngineSurvivesCtrlC(t *testing.T) {
	dir, env := stubs(t)
	// `make up` in the foreground: engine.sh runs in the terminal's process group.
	cmd := exec.Command("bash", "engine.sh")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("engine.sh: %v\n%s", err, out.String())
	}
	pid := pidOf(t, dir)
	t.Cleanup(func() { kill(pid) })
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) // Ctrl-C
	if waitGone(pid, time.Second) {
		t.Fatalf("Ctrl-C at the terminal stopped the engine make started:\n%s", out.String())
	}

	// Control: an engine started the old way (in the same process group) does stop, so the
	// stand-in reacts to Ctrl-C as dockerd does.
	ctl := exec.Command("bash", "-c", `rm -f "$STUB_DIR/ready"; nohup "$DOCKERD" >/dev/null 2>&1 & sleep 0.5`)
	ctl.Env = append(env, "DOCKER_PIDFILE="+filepath.Join(dir, "ctl.pid"))
	ctl.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ctl.Run(); err != nil {
		t.Fatal(err)
	}
	cpid := pidFile(t, filepath.Join(dir, "ctl.pid"))
	t.Cleanup(func() { kill(cpid) })
	// It writes "ready" once its handlers are in place; a Ctrl-C before that would be ignored.
	if err := wait.Until(10*time.Second, "the control stand-in to be ready", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	}); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(-ctl.Process.Pid, syscall.SIGINT)
	if !waitGone(cpid, 5*time.Second) {
		t.Fatal("control: the stand-in ignored Ctrl-C in its own process group")
	}
}

// A second start while an engine is still shutting down waits for it to go, then starts a new
// one, instead of failing on its pid file.
func TestEngineStartWaitsForOneShuttingDown(t *testing.T) {
	dir, env := stubs(t)
	old := exec.Command(filepath.Join(dir, "dockerd"))
	old.Env = append(env, "STUB_LIFETIME=1.5") // shutting down: alive a while, never answering
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	go old.Wait()
	pidOf(t, dir)
	cmd := exec.Command("bash", "engine.sh")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("engine.sh with an engine shutting down: %v\n%s", err, out)
	}
	pid := pidOf(t, dir)
	t.Cleanup(func() { kill(pid) })
	if pid == old.Process.Pid || alive(old.Process.Pid) || !strings.Contains(string(out), "waiting") {
		t.Fatalf("new engine pid %d, old %d (alive %v):\n%s", pid, old.Process.Pid, alive(old.Process.Pid), out)
	}
}
