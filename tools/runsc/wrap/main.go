// Command airlock-runsc is gVisor's runsc as airlock registers it with the container engine
// (scripts/runsc.sh): it runs the runsc beside it with the arguments it was given. When the
// engine asks for a container to be created (or restored) for which the airlock node has made a
// network namespace, /run/netns/airlock-<container id>, it first names that namespace in the
// container's OCI spec, so the sandbox boots in the namespace the node has wired (runsc reads
// its namespace's interfaces once, as it boots). Any other command or container passes through
// unchanged; a spec it cannot rewrite fails the create, so a sandbox never boots outside the
// namespace made for it.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// netnsDir is where the node's named namespaces are (netns.NewNamed's directory).
var netnsDir = "/run/netns"

// containerID is the engine's container id: what a namespace of the node's is named after.
var containerID = regexp.MustCompile(`^[0-9a-f]{64}$`)

func main() {
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	runsc := filepath.Join(filepath.Dir(self), "runsc")
	args := os.Args[1:]
	if err := prepare(args); err != nil {
		fail(err)
	}
	fail(syscall.Exec(runsc, append([]string{runsc}, args...), os.Environ()))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "airlock-runsc:", err)
	os.Exit(1)
}

// prepare names the node's namespace in the spec of the container args create or restore,
// when the node made one for it.
func prepare(args []string) error {
	cmd, rest := subcommand(args)
	if (cmd != "create" && cmd != "restore") || len(rest) == 0 {
		return nil
	}
	id := rest[len(rest)-1]
	if !containerID.MatchString(id) {
		return nil
	}
	ns := filepath.Join(netnsDir, "airlock-"+id)
	if _, err := os.Lstat(ns); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	bundle := flagValue(rest, "bundle", "b")
	if bundle == "" {
		bundle = "."
	}
	return setNetns(filepath.Join(bundle, "config.json"), ns)
}

// valued are runsc's global flags that take their value as the next argument, as the engine's
// shim passes them.
var valued = map[string]bool{"root": true, "log": true, "log-format": true, "debug-log": true, "platform": true,
	"network": true, "panic-log": true, "coverage-report": true, "profile-cpu": true, "profile-heap": true}

// subcommand is the first argument that is neither a global flag nor a flag's value, and the
// arguments after it.
func subcommand(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, args[i+1:]
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && valued[name] {
			i++
		}
	}
	return "", nil
}

// flagValue is the value of the flag -name or -short (either given with one or two dashes, as
// `-f v` or `-f=v`) in args, or "".
func flagValue(args []string, names ...string) string {
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		for _, n := range names {
			if name != n {
				continue
			}
			if eq {
				return value
			}
			if i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

// setNetns makes the network namespace of the OCI spec at path ns, keeping every other byte of
// meaning (numbers are kept as written).
func setNetns(path, ns string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the container's spec: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("the container's spec %s: %w", path, err)
	}
	linux, _ := spec["linux"].(map[string]any)
	if linux == nil {
		return fmt.Errorf("the container's spec %s has no linux section", path)
	}
	nss, _ := linux["namespaces"].([]any)
	found := false
	for _, n := range nss {
		if m, ok := n.(map[string]any); ok && m["type"] == "network" {
			m["path"], found = ns, true
		}
	}
	if !found {
		return fmt.Errorf("the container's spec %s has no network namespace of its own to replace", path)
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".airlock"
	if err := os.WriteFile(tmp, out, st.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
