package scripts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
)

// runscStubs extends stubs with what runsc.sh needs: a cache already holding a runsc binary
// for this tools/runsc (so nothing is built but the registration tool), the engine's
// configuration file, and a link outside the checkout.
func runscStubs(t *testing.T) (dir, daemon, binary string, env []string) {
	t.Helper()
	dir, env = stubs(t)
	mod, err := os.ReadFile("../tools/runsc/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("../tools/runsc/go.sum")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(append(mod, sum...))
	cache := t.TempDir()
	binary = filepath.Join(cache, "runsc-"+hex.EncodeToString(h[:])[:16], "runsc")
	os.MkdirAll(filepath.Dir(binary), 0o755)
	if err := os.WriteFile(binary, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	daemon = filepath.Join(dir, "daemon.json")
	env = append(env, "AIRLOCK_CACHE="+cache, "DOCKER_DAEMON_JSON="+daemon, "RUNSC_LINK="+filepath.Join(dir, "bin", "runsc"))
	return dir, daemon, binary, env
}

func runRunsc(t *testing.T, env []string, extra ...string) string {
	t.Helper()
	cmd := exec.Command("bash", "runsc.sh")
	cmd.Env = append(env, extra...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("runsc.sh: %v\n%s", err, out)
	}
	return string(out)
}

func hups(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "signals"))
	return strings.Count(string(b), "HUP")
}

func listed(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "runtimes"))
	return strings.TrimSpace(string(b))
}

// TestRunscRegistersByReloadNotRestart: runsc.sh adds one engine runtime per gVisor platform to
// daemon.json, keeping the rest of the file; an engine someone else started is reloaded
// (SIGHUP), never restarted, and only when the file changed; an engine that is not running is
// started, and reads the file.
func TestRunscRegistersByReloadNotRestart(t *testing.T) {
	dir, daemon, binary, env := runscStubs(t)
	if err := os.WriteFile(daemon, []byte(`{"log-driver": "json-file"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The engine someone else started, running.
	eng := startEngineStub(t, dir, env)

	out := runRunsc(t, env)
	for _, want := range []string{"registered runsc (platform systrap)", "registered runsc-ptrace (platform ptrace)"} {
		if !strings.Contains(out, want) {
			t.Errorf("runsc.sh did not say %q:\n%s", want, out)
		}
	}
	if n := hups(dir); n != 1 {
		t.Errorf("the running engine got %d reloads, want 1", n)
	}
	if !alive(eng.Process.Pid) || pidOf(t, dir) != eng.Process.Pid {
		t.Fatal("the running engine was restarted, not reloaded")
	}
	if got := listed(dir); got != "runc runsc runsc-ptrace" {
		t.Errorf("after the reload the engine lists %q", got)
	}
	var conf struct {
		LogDriver string `json:"log-driver"`
		Runtimes  map[string]struct {
			Path string   `json:"path"`
			Args []string `json:"runtimeArgs"`
		} `json:"runtimes"`
	}
	b, _ := os.ReadFile(daemon)
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatalf("daemon.json is no longer JSON: %v\n%s", err, b)
	}
	if conf.LogDriver != "json-file" {
		t.Errorf("the rest of daemon.json was lost:\n%s", b)
	}
	// The engine runs runsc through airlock's wrapper, built beside it.
	wrapper := filepath.Join(filepath.Dir(binary), "airlock-runsc")
	if st, err := os.Stat(wrapper); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("no wrapper executable beside runsc: %v", err)
	}
	for name, platform := range map[string]string{"runsc": "systrap", "runsc-ptrace": "ptrace"} {
		rt := conf.Runtimes[name]
		if rt.Path != wrapper || !reflect.DeepEqual(rt.Args, []string{"--platform=" + platform}) {
			t.Errorf("runtime %s is %+v, want %s with --platform=%s", name, rt, wrapper, platform)
		}
	}
	if target, _ := os.Readlink(filepath.Join(dir, "bin", "runsc")); target != binary {
		t.Errorf("the link points at %q, want %s", target, binary)
	}

	// Again: nothing to change, so no reload.
	if out := runRunsc(t, env); strings.Contains(out, "registered") || hups(dir) != 1 {
		t.Errorf("a second run changed something (%d reloads):\n%s", hups(dir), out)
	}
	// Another platform asked for: one more reload, the same engine.
	runRunsc(t, env, "RUNSC_PLATFORMS=systrap ptrace kvm")
	if hups(dir) != 2 || listed(dir) != "runc runsc runsc-kvm runsc-ptrace" || pidOf(t, dir) != eng.Process.Pid {
		t.Errorf("adding kvm: %d reloads, engine lists %q", hups(dir), listed(dir))
	}

	// No engine running: it is started (by engine.sh) and reads the file at start.
	eng.Process.Kill()
	if !waitGone(eng.Process.Pid, 5*time.Second) {
		t.Fatal("the engine stand-in did not stop")
	}
	os.Remove(filepath.Join(dir, "ready"))
	os.Remove(daemon)
	runRunsc(t, env)
	pid := pidOf(t, dir)
	t.Cleanup(func() { kill(pid) })
	if pid == eng.Process.Pid || !alive(pid) {
		t.Fatal("no new engine was started")
	}
	if hups(dir) != 2 || listed(dir) != "runc runsc runsc-ptrace" {
		t.Errorf("the started engine: %d reloads in all, lists %q", hups(dir), listed(dir))
	}
}

// A platform that is not gVisor's is refused, naming it, and nothing is registered.
func TestRunscRefusesAnUnknownPlatform(t *testing.T) {
	dir, daemon, _, env := runscStubs(t)
	cmd := exec.Command("bash", "runsc.sh")
	cmd.Env = append(env, "RUNSC_PLATFORMS=systrap hvf")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "RUNSC_PLATFORMS names hvf, which is not systrap, ptrace or kvm") {
		t.Fatalf("runsc.sh with platform hvf: %v\n%s", err, out)
	}
	if _, err := os.Stat(daemon); err == nil {
		t.Error("daemon.json was written")
	}
	if hups(dir) != 0 {
		t.Error("the engine was reloaded")
	}
}

// startEngineStub starts the stand-in dockerd in dir (the engine someone else started, running)
// and waits until it is ready; the test's end stops it.
func startEngineStub(t *testing.T, dir string, env []string) *exec.Cmd {
	t.Helper()
	eng := exec.Command(filepath.Join(dir, "dockerd"))
	eng.Env = env
	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	go eng.Wait()
	t.Cleanup(func() { eng.Process.Kill() })
	wait.For(t, 5*time.Second, "the engine stand-in to be ready", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	return eng
}
