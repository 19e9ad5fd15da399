// Package deptest holds a package's dependency list to a checked-in file, as tailscale's
// depaware does for its binaries: a test that calls Check fails when a dependency is added or
// removed without the file being updated, and always when one belongs to a server family (a
// container engine's, Kubernetes', Vault's, Redis's or Prometheus's client, or one of airlock's
// own server packages), which a client must never link.
package deptest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goos and goarch are the platform the lists are made for: a package's dependencies differ from one
// platform to another (golang.org/x/sys/unix), and the lists must not.
const goos, goarch = "linux", "amd64"

// module is airlock's module path: its server packages are named below it.
const module = "github.com/airlock-dev/airlock"

// Family is a group of packages no client may link, named by the import paths it covers.
type Family struct {
	Name string
	// Prefixes match an import path and every package below it ("k8s.io" matches
	// "k8s.io/client-go/rest"); Exact match one import path alone.
	Prefixes, Exact []string
}

func (f Family) covers(path string) bool {
	if slices.Contains(f.Exact, path) {
		return true
	}
	for _, p := range f.Prefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// ServerFamilies are the packages a client of the node's API must not link: each brings a
// server's client library, its package initialisation and its size, or is airlock's own server.
var ServerFamilies = []Family{
	{Name: "Kubernetes", Prefixes: []string{"k8s.io", "sigs.k8s.io"}},
	{Name: "Docker", Prefixes: []string{"github.com/docker", "github.com/moby", "github.com/containerd"}},
	{Name: "Vault", Prefixes: []string{"github.com/hashicorp"}},
	{Name: "Redis", Prefixes: []string{"github.com/redis"}},
	{Name: "Prometheus", Prefixes: []string{"github.com/prometheus", "google.golang.org/protobuf", "github.com/golang/protobuf"}},
	{Name: "JWT", Prefixes: []string{"github.com/golang-jwt"}},
	{Name: "airlock's server", Exact: []string{module + "/api"},
		Prefixes: []string{module + "/pool", module + "/token", module + "/gateway", module + "/node", module + "/config", module + "/internal/devstack"}},
}

// Check lists the dependencies of pkg (an import path or a directory such as "."), outside the
// standard library, and compares them with the list in file (one import path a line; lines
// starting with # are comments). With update, it writes the list to file instead, unless a
// dependency is forbidden. Any dependency in forbidden fails the test, naming its family and
// the chain of imports that brings it in.
func Check(t *testing.T, pkg, file string, update bool, forbidden []Family) {
	t.Helper()
	deps, imports := list(t, pkg)
	root := deps[len(deps)-1]
	bad := false
	for _, f := range forbidden {
		var hit, nearest []string
		for _, d := range deps {
			if !f.covers(d) {
				continue
			}
			hit = append(hit, d)
			if c := chain(imports, root, d); nearest == nil || len(c) < len(nearest) {
				nearest = c
			}
		}
		if len(hit) > 0 {
			bad = true
			t.Errorf("%s links %d package(s) of %s (%s), the nearest by %s; a client must never link them: "+
				"put what it needs of them in a leaf package", root, len(hit), f.Name, strings.Join(append(slices.Clone(f.Exact), f.Prefixes...), ", "),
				strings.Join(nearest, " -> "))
		}
	}
	if update {
		if bad {
			t.Fatalf("%s not updated: the forbidden dependencies above must go first", file)
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "# The packages %s links, outside the standard library, on %s/%s (go list -deps),\n", root, goos, goarch)
		fmt.Fprintf(&b, "# held by a test: a new one fails it until this list is updated with -update.\n")
		for _, d := range sorted(deps) {
			fmt.Fprintln(&b, d)
		}
		if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := read(t, file)
	got := sorted(deps)
	var added, removed []string
	for _, d := range got {
		if !slices.Contains(want, d) {
			added = append(added, d)
		}
	}
	for _, d := range want {
		if !slices.Contains(got, d) {
			removed = append(removed, d)
		}
	}
	if len(added)+len(removed) > 0 {
		t.Errorf("the dependencies of %s differ from %s:\n  added:   %s\n  removed: %s\n"+
			"If that is intended (and none is a server's: %s), update the list with\n  go test -run %s %s -update\nand commit it.",
			root, file, strings.Join(added, " "), strings.Join(removed, " "), familyNames(forbidden), t.Name(), fromRoot(pkg))
	}
}

// list returns pkg's dependencies outside the standard library in the order go list gives them
// (pkg itself last), and each one's imports.
func list(t *testing.T, pkg string) ([]string, map[string][]string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH to list the dependencies of %s: %v", pkg, err)
	}
	cmd := exec.Command(goTool, "list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{end}}`, pkg)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
	}
	var deps []string
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		deps = append(deps, f[0])
		imports[f[0]] = f[1:]
	}
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", pkg)
	}
	return deps, imports
}

// chain is the shortest chain of imports from root to dep.
func chain(imports map[string][]string, root, dep string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == dep {
			var c []string
			for ; p != ""; p = prev[p] {
				c = append(c, p)
			}
			slices.Reverse(c)
			return c
		}
		for _, i := range imports[p] {
			if _, seen := prev[i]; !seen {
				prev[i] = p
				queue = append(queue, i)
			}
		}
	}
	return []string{root, "...", dep}
}

func read(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	var out []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func familyNames(fs []Family) string {
	var n []string
	for _, f := range fs {
		n = append(n, f.Name)
	}
	return strings.Join(n, ", ")
}

// fromRoot names pkg, a directory relative to the test's, from the module's root, as a
// command given there names it ("./client").
func fromRoot(pkg string) string {
	dir, err := os.Getwd()
	if err != nil || !strings.HasPrefix(pkg, ".") {
		return pkg
	}
	dir = filepath.Join(dir, pkg)
	for root := dir; ; root = filepath.Dir(root) {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				return pkg
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(root) == root {
			return pkg
		}
	}
}
