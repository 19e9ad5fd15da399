package scripts

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// crunStubs extends stubs with what crun.sh needs: a crun binary, a cache for the registration
// tool, the engine's configuration file, a hybrid cgroup root whose v2 hierarchy holds
// controllers (v2) and enables some (enabled), and a stand-in mount that records its arguments
// and, as the kernel does, takes the controller it binds off the v2 hierarchy.
func crunStubs(t *testing.T, v2, enabled string) (dir, daemon, crun, cgroot string, env []string) {
	t.Helper()
	dir, env = stubs(t)
	crun = filepath.Join(dir, "crun")
	os.WriteFile(crun, []byte("#!/bin/sh\n"), 0o755)
	cgroot = filepath.Join(dir, "cgroup")
	os.MkdirAll(filepath.Join(cgroot, "unified"), 0o755)
	os.MkdirAll(filepath.Join(cgroot, "memory"), 0o755)
	os.WriteFile(filepath.Join(cgroot, "unified", "cgroup.controllers"), []byte(v2+"\n"), 0o644)
	os.WriteFile(filepath.Join(cgroot, "unified", "cgroup.subtree_control"), []byte(enabled+"\n"), 0o644)
	mount := filepath.Join(dir, "mount")
	// mount -t cgroup -o NAME cgroup DIR
	os.WriteFile(mount, []byte(`#!/bin/sh
echo "$*" >> "`+dir+`/mounts"
f="`+cgroot+`/unified/cgroup.controllers"
tr ' ' '\n' < "$f" | grep -vx "$4" | tr '\n' ' ' | sed 's/ *$//' > "$f.new" && mv "$f.new" "$f"
`), 0o755)
	daemon = filepath.Join(dir, "daemon.json")
	env = append(env, "AIRLOCK_CACHE="+t.TempDir(), "DOCKER_DAEMON_JSON="+daemon, "CRUN="+crun, "CGROUP_ROOT="+cgroot, "MOUNT="+mount)
	return dir, daemon, crun, cgroot, env
}

func mounts(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "mounts"))
	return strings.TrimSpace(string(b))
}

// TestCrunBindsUnusedV2ControllersAndRegisters: on a hybrid host whose v2 hierarchy holds
// hugetlb, used by no v2 cgroup (these machines), crun.sh binds it to a v1 hierarchy of its own,
// so crun's check passes, and registers crun with the running engine by a reload, keeping the
// rest of daemon.json; a second run mounts nothing and does not reload.
func TestCrunBindsUnusedV2ControllersAndRegisters(t *testing.T) {
	dir, daemon, crun, cgroot, env := crunStubs(t, "hugetlb", "")
	os.WriteFile(daemon, []byte(`{"log-driver": "json-file"}`), 0o644)
	eng := startEngineStub(t, dir, env)
	run := func() string {
		t.Helper()
		cmd := exec.Command("bash", "crun.sh")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("crun.sh: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run()
	if got, want := mounts(dir), "-t cgroup -o hugetlb cgroup "+filepath.Join(cgroot, "hugetlb"); got != want {
		t.Errorf("mounted %q, want %q\n%s", got, want, out)
	}
	if fi, err := os.Stat(filepath.Join(cgroot, "hugetlb")); err != nil || !fi.IsDir() {
		t.Errorf("no mount point for hugetlb: %v", err)
	}
	if hups(dir) != 1 || listed(dir) != "runc crun" || pidOf(t, dir) != eng.Process.Pid {
		t.Errorf("after crun.sh: %d reloads, the engine lists %q\n%s", hups(dir), listed(dir), out)
	}
	var conf struct {
		LogDriver string `json:"log-driver"`
		Runtimes  map[string]struct {
			Path string `json:"path"`
		} `json:"runtimes"`
	}
	b, _ := os.ReadFile(daemon)
	if err := json.Unmarshal(b, &conf); err != nil || conf.LogDriver != "json-file" || conf.Runtimes["crun"].Path != crun {
		t.Errorf("daemon.json is now %s (%v)", b, err)
	}
	if out := run(); mounts(dir) != "-t cgroup -o hugetlb cgroup "+filepath.Join(cgroot, "hugetlb") || hups(dir) != 1 || strings.Contains(out, "registered") {
		t.Errorf("a second run changed something: mounts %q, %d reloads\n%s", mounts(dir), hups(dir), out)
	}
}

// A controller a v2 cgroup enables is in use there: crun.sh moves nothing, registers nothing,
// and says which controller and why.
func TestCrunLeavesAControllerInUse(t *testing.T) {
	dir, daemon, _, _, env := crunStubs(t, "hugetlb pids", "pids")
	cmd := exec.Command("bash", "crun.sh")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "enables the pids controller") {
		t.Fatalf("crun.sh with pids enabled on v2: %v\n%s", err, out)
	}
	if m := mounts(dir); m != "" {
		t.Errorf("mounted %q with a controller in use on v2", m)
	}
	if _, err := os.Stat(daemon); err == nil {
		t.Error("daemon.json was written")
	}
}
