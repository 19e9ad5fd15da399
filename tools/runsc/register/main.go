// Command register adds a runtime to a Docker engine's daemon.json, keeping everything else
// the file holds, and says whether it changed anything (exit 0: changed, 3: already so), so
// the caller reloads the engine only when needed.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

func main() {
	file := flag.String("file", "/etc/docker/daemon.json", "the engine's configuration file")
	name := flag.String("name", "runsc", "runtime name")
	path := flag.String("path", "", "the runtime's binary")
	var args multi
	flag.Var(&args, "arg", "an argument the engine passes the runtime (repeatable)")
	flag.Parse()
	changed, err := register(*file, *name, *path, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "register:", err)
		os.Exit(1)
	}
	if !changed {
		os.Exit(3)
	}
}

type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// register makes file name runtime at path with args, and reports whether it had to change it.
func register(file, name, path string, args []string) (bool, error) {
	if name == "" || !filepath.IsAbs(path) {
		return false, errors.New("a runtime needs a name and an absolute path")
	}
	conf := map[string]any{}
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, err
	case len(bytes.TrimSpace(b)) > 0:
		if err := json.Unmarshal(b, &conf); err != nil {
			return false, fmt.Errorf("%s is not JSON the engine could read either: %v", file, err)
		}
	}
	runtimes, _ := conf["runtimes"].(map[string]any)
	if runtimes == nil {
		runtimes = map[string]any{}
	}
	want := map[string]any{"path": path}
	if len(args) > 0 {
		a := make([]any, len(args))
		for i, v := range args {
			a[i] = v
		}
		want["runtimeArgs"] = a
	}
	if old, err := json.Marshal(runtimes[name]); err == nil {
		if nw, _ := json.Marshal(want); bytes.Equal(old, nw) {
			return false, nil
		}
	}
	runtimes[name] = want
	conf["runtimes"] = runtimes
	out, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return false, err
	}
	tmp := file + ".airlock.tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, file)
}
