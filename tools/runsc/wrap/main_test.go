package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// bundle writes an OCI spec with the given namespaces into a bundle directory of its own.
func bundle(t *testing.T, namespaces string) string {
	t.Helper()
	dir := t.TempDir()
	spec := `{"ociVersion":"1.0.2","process":{"user":{"uid":10001,"gid":10001}},"linux":{"resources":{"memory":{"limit":9007199254740993}},"namespaces":[` + namespaces + `]}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCreateJoinsTheNodesNamespace: the engine shim's create of a container the node made a
// namespace for names that namespace in the spec, every number kept as written; the same
// create with no namespace made, another command, and a stray id change nothing.
func TestCreateJoinsTheNodesNamespace(t *testing.T) {
	netnsDir = t.TempDir()
	ns := filepath.Join(netnsDir, "airlock-"+id)
	if err := os.WriteFile(ns, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	b := bundle(t, `{"type":"pid"},{"type":"network"},{"type":"mount"}`)
	shim := func(cmd string, rest ...string) []string {
		return append([]string{"--platform=systrap", "--root", "/run/containerd/runc/moby", "--log", "/run/x/log.json", "--log-format", "json", cmd}, rest...)
	}
	read := func() string {
		out, err := os.ReadFile(filepath.Join(b, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	before := read()
	for _, args := range [][]string{
		shim("state", id),
		shim("create", "--bundle", b, "--pid-file", "/run/x/init.pid", strings.Repeat("f", 64)),
		shim("create", "--bundle", b, "not-an-id"),
	} {
		if err := prepare(args); err != nil || read() != before {
			t.Fatalf("%v: %v, spec now %s", args, err, read())
		}
	}
	if err := prepare(shim("create", "--bundle", b, "--pid-file", "/run/x/init.pid", id)); err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Linux struct {
			Resources struct {
				Memory struct {
					Limit json.Number `json:"limit"`
				} `json:"memory"`
			} `json:"resources"`
			Namespaces []struct{ Type, Path string } `json:"namespaces"`
		} `json:"linux"`
	}
	if err := json.Unmarshal([]byte(read()), &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Linux.Resources.Memory.Limit != "9007199254740993" {
		t.Errorf("a number changed: %s", spec.Linux.Resources.Memory.Limit)
	}
	for _, n := range spec.Linux.Namespaces {
		if (n.Type == "network") != (n.Path == ns) {
			t.Errorf("namespace %s has path %q", n.Type, n.Path)
		}
	}
	if st, _ := os.Stat(filepath.Join(b, "config.json")); st.Mode().Perm() != 0o600 {
		t.Errorf("the spec's mode is now %v", st.Mode())
	}
	// A restore, with -bundle=, the same way.
	b = bundle(t, `{"type":"network"}`)
	if err := prepare([]string{"--root=/r", "restore", "--image-path", "/ckpt", "-bundle=" + b, id}); err != nil || !strings.Contains(read(), ns) {
		t.Fatalf("restore: %v: %s", err, read())
	}
}

// TestCreateRefusesASpecItCannotPlace: a container the node made a namespace for whose spec has
// no network namespace of its own (the host's), or is not a spec at all, is not created.
func TestCreateRefusesASpecItCannotPlace(t *testing.T) {
	netnsDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(netnsDir, "airlock-"+id), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	b := bundle(t, `{"type":"pid"}`)
	if err := prepare([]string{"create", "--bundle", b, id}); err == nil || !strings.Contains(err.Error(), "no network namespace of its own") {
		t.Errorf("a spec on the host's network: %v", err)
	}
	if err := os.WriteFile(filepath.Join(b, "config.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := prepare([]string{"create", "--bundle", b, id}); err == nil {
		t.Error("a spec that is not JSON was passed on")
	}
}
