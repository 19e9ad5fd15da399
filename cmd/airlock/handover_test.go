package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// airlock up (and the node's other commands) runs airlock-node with the same arguments, in the
// same process: what it prints and its exit code are the user's answer.
func TestNodeCommandsAreHandedOver(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "airlock-node")
	if err := os.WriteFile(node, []byte("#!/bin/sh\necho \"node: $*\"; echo \"pid $$\" >&2; exit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, errs, code := airlock(t, []string{"PATH=" + dir}, "up", "--config", "x.yaml")
	if code != 7 || out != "node: up --config x.yaml\n" || !strings.HasPrefix(errs, "pid ") {
		t.Errorf("airlock up: exit %d, stdout %q, stderr %q; want airlock-node's own", code, out, errs)
	}
	// The node's usage is answered here, with no node binary.
	if out, _, code := airlock(t, []string{"PATH=" + t.TempDir()}, "template", "--help"); code != 0 || !strings.HasPrefix(out, "usage: airlock template build") {
		t.Errorf("airlock template --help: %d %q", code, out)
	}
	_, errs, code = airlock(t, []string{"PATH=" + t.TempDir()}, "image", "build")
	if code != 1 || !strings.Contains(errs, "airlock-node not found") || !strings.Contains(errs, "install it beside airlock") {
		t.Errorf("no airlock-node: exit %d, stderr %q", code, errs)
	}
}
