package config

import (
	"os/exec"
	"strings"
	"testing"
)

// Package config links no sandbox backend: it reads and checks a node's configuration, and
// everything that reads it (every command of airlock, the node) would otherwise pay for a
// backend's client and its package initialisation. What it needs to know of a backend (the
// shipped images' names) lives in a leaf package both use (pool/inside).
func TestConfigLinksNoBackend(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list config's dependencies:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	backends := []string{
		"github.com/airlock-dev/airlock/pool/docker", "github.com/airlock-dev/airlock/pool/kubernetes",
		"github.com/docker/", "github.com/moby/", "github.com/containerd/", "k8s.io/",
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, b := range backends {
			if strings.HasPrefix(dep, b) {
				t.Errorf("config depends on %s, a sandbox backend's package (prefix %s); config must link no backend", dep, b)
			}
		}
	}
}
