package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// besideNode copies this test binary, which runs as airlock (main_test.go), into a folder of
// its own, with node beside it as airlock-node unless node is empty; it returns the copy.
func besideNode(t *testing.T, node string) string {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	bin := filepath.Join(dir, "airlock")
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, self); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if node != "" {
		if err := os.WriteFile(filepath.Join(dir, "airlock-node"), []byte(node), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// runAs runs bin as airlock with env added.
func runAs(t *testing.T, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// Under -race a process waits a second as it exits unless told otherwise; these run many.
	cmd.Env = append(append(os.Environ(), "AIRLOCK_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0", "AIRLOCK_STATE_DIR="+t.TempDir()), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// airlock up (and the node's other commands) runs airlock-node with the same arguments, in the
// same process: what it prints and its exit code are the user's answer.
func TestNodeCommandsAreHandedOver(t *testing.T) {
	bin := besideNode(t, "#!/bin/sh\necho \"node: $*\"; echo \"pid $$\" >&2; exit 7\n")
	out, errs, code := runAs(t, bin, nil, "up", "--config", "x.yaml")
	if code != 7 || out != "node: up --config x.yaml\n" || !strings.HasPrefix(errs, "pid ") {
		t.Errorf("airlock up: exit %d, stdout %q, stderr %q; want airlock-node's own", code, out, errs)
	}
	// The node's usage is answered here, with no node binary.
	if out, _, code := airlock(t, nil, "template", "--help"); code != 0 || !strings.HasPrefix(out, "usage: airlock template build") {
		t.Errorf("airlock template --help: %d %q", code, out)
	}
	// Only the airlock-node beside airlock is run: one first on PATH is not.
	alone := besideNode(t, "")
	onPath := t.TempDir()
	ran := filepath.Join(t.TempDir(), "ran")
	if err := os.WriteFile(filepath.Join(onPath, "airlock-node"), []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, errs, code = runAs(t, alone, []string{"PATH=" + onPath + ":" + os.Getenv("PATH")}, "image", "build")
	if code != 1 || !strings.Contains(errs, "airlock-node not found") || !strings.Contains(errs, "install it beside airlock") {
		t.Errorf("no airlock-node beside airlock: exit %d, stderr %q", code, errs)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("airlock ran the airlock-node it found on PATH")
	}
}
