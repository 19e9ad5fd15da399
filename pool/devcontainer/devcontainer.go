// Package devcontainer reads the part of a devcontainer.json that maps onto a sandbox template:
// the image or Dockerfile it starts from, its environment, the ports it forwards and the
// commands it runs once created (run here at build time). Fields that would weaken a sandbox
// (privileged, capAdd, mounts, runArgs, initializeCommand on the host...) are refused; fields
// that have no meaning for a sandbox are reported as ignored. Every error names the file and
// the line.
package devcontainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Spec is what a devcontainer.json says of a template.
type Spec struct {
	Path string // the file, as given
	// Image is the image it starts from, or Dockerfile (absolute) with Context (absolute) and
	// Args when it builds one; Line is where the file says so.
	Image      string
	Dockerfile string
	Context    string
	Args       map[string]string
	Line       int
	Env        map[string]string // containerEnv and remoteEnv
	Ports      []int             // forwardPorts
	Commands   []Command         // onCreateCommand, updateContentCommand, postCreateCommand, in that order
	Ignored    []string          // "FILE:LINE: FIELD is ignored: why"
}

// Command is one command a lifecycle field names: a shell line (Shell) or an argument list
// (Exec).
type Command struct {
	Field string // "postCreateCommand", or "postCreateCommand.NAME" for one of an object's
	Line  int
	Shell string
	Exec  []string
}

// refused are fields that would loosen the sandbox or act outside it.
var refused = map[string]string{
	"privileged":        "sandboxes are never privileged",
	"capAdd":            "sandboxes drop every capability",
	"securityOpt":       "sandboxes keep airlock's security options",
	"runArgs":           "airlock starts the container itself",
	"mounts":            "a sandbox mounts nothing from the host",
	"workspaceMount":    "the workspace is airlock's tmpfs",
	"initializeCommand": "it would run on the host",
	"features":          "features are fetched from a registry, which is not reachable; install in the Dockerfile instead",
	"dockerComposeFile": "compose setups are not supported; use one image or Dockerfile",
	"appPort":           "use forwardPorts",
	"init":              "airlock always runs an init",
}

// ignored are fields that have no meaning for a sandbox, with why.
var ignored = map[string]string{
	"name":                 "",
	"$schema":              "",
	"customizations":       "",
	"extensions":           "",
	"settings":             "",
	"remoteUser":           "sandboxes run as the template's user",
	"containerUser":        "sandboxes run as the template's user",
	"updateRemoteUserUID":  "sandboxes run as the template's user",
	"userEnvProbe":         "",
	"shutdownAction":       "",
	"overrideCommand":      "the sandbox always idles in sleep",
	"workspaceFolder":      "the workspace is the template's workdir",
	"postStartCommand":     "a leased sandbox runs what the agent runs; put setup in postCreateCommand",
	"postAttachCommand":    "a leased sandbox runs what the agent runs; put setup in postCreateCommand",
	"waitFor":              "",
	"hostRequirements":     "resources are the template's cpus and memory_mb",
	"portsAttributes":      "",
	"otherPortsAttributes": "",
}

// Load reads and checks the devcontainer.json at path (JSON with comments and trailing commas).
func Load(path string) (Spec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, fmt.Errorf("devcontainer: %w", err)
	}
	return Parse(path, raw)
}

// Parse reads a devcontainer.json whose content is raw; path names it in errors and anchors
// the relative paths it holds.
func Parse(path string, raw []byte) (Spec, error) {
	s := Spec{Path: path}
	clean, err := standardize(raw)
	var fields []field
	if err == nil {
		fields, err = topLevel(clean)
	}
	if err != nil {
		var se *syntaxError
		var je *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return s, fmt.Errorf("%s:%d: %s", path, lineAt(raw, se.off), se.msg)
		case errors.As(err, &je):
			return s, fmt.Errorf("%s:%d: %v", path, lineAt(raw, int(je.Offset)), je)
		}
		return s, fmt.Errorf("%s: %v", path, err)
	}
	dir := filepath.Dir(path)
	var errs []error
	bad := func(f field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s: %s", path, lineAt(raw, f.off), f.name, fmt.Sprintf(format, args...)))
	}
	decode := func(f field, v any, want string) bool {
		if err := json.Unmarshal(f.value, v); err != nil {
			bad(f, "want %s", want)
			return false
		}
		return true
	}
	for _, f := range fields {
		line := lineAt(raw, f.off)
		switch f.name {
		case "image":
			if decode(f, &s.Image, "an image name") && (s.Image == "" || strings.ContainsFunc(s.Image, unicode.IsSpace)) {
				bad(f, "%q is not an image name", s.Image)
			}
			s.Line = line
		case "build":
			var b struct {
				Dockerfile string            `json:"dockerfile"`
				Context    string            `json:"context"`
				Args       map[string]string `json:"args"`
				Target     string            `json:"target"`
			}
			dec := json.NewDecoder(bytes.NewReader(f.value))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&b); err != nil {
				bad(f, "want {dockerfile, context, args}: %v", err)
				continue
			}
			if b.Dockerfile == "" {
				bad(f, "build.dockerfile is required")
				continue
			}
			if b.Target != "" {
				bad(f, "build.target is not supported: the last stage is the sandbox")
			}
			if b.Context == "" {
				b.Context = "."
			}
			// As in the specification: the Dockerfile and the context are relative to the
			// devcontainer.json. Both stay inside its project (the folder holding .devcontainer):
			// a file from a repository must not send the host's files into an image.
			s.Dockerfile, s.Context, s.Args, s.Line = abs(dir, b.Dockerfile), abs(dir, b.Context), b.Args, line
			root := ProjectRoot(path)
			for what, p := range map[string]string{"build.dockerfile": s.Dockerfile, "build.context": s.Context} {
				if !Within(root, p) {
					bad(f, "%s %s is outside the project %s", what, p, root)
				}
			}
		case "containerEnv", "remoteEnv":
			var env map[string]string
			if !decode(f, &env, "an object of strings") {
				continue
			}
			for k, v := range env {
				if strings.Contains(v, "${") {
					bad(f, "%s: variables (${...}) are not substituted; give the value itself", k)
					continue
				}
				if s.Env == nil {
					s.Env = map[string]string{}
				}
				s.Env[k] = v
			}
		case "forwardPorts":
			var ports []json.RawMessage
			if !decode(f, &ports, "a list of ports") {
				continue
			}
			for _, p := range ports {
				n, err := port(p)
				if err != nil {
					bad(f, "%v", err)
					continue
				}
				if !slices.Contains(s.Ports, n) {
					s.Ports = append(s.Ports, n)
				}
			}
		case "onCreateCommand", "updateContentCommand", "postCreateCommand":
			cmds, err := commands(f.name, line, f.value)
			if err != nil {
				bad(f, "%v", err)
				continue
			}
			s.Commands = append(s.Commands, cmds...)
		default:
			if why, ok := refused[f.name]; ok {
				bad(f, "not supported: %s", why)
			} else if why, ok := ignored[f.name]; ok {
				if why != "" {
					s.Ignored = append(s.Ignored, fmt.Sprintf("%s:%d: %s is ignored: %s", path, line, f.name, why))
				}
			} else {
				s.Ignored = append(s.Ignored, fmt.Sprintf("%s:%d: %s is not a field airlock knows; ignored", path, line, f.name))
			}
		}
	}
	if s.Image != "" && s.Dockerfile != "" {
		errs = append(errs, fmt.Errorf("%s:%d: set image or build, not both", path, s.Line))
	}
	if s.Image == "" && s.Dockerfile == "" && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s: needs image or build.dockerfile", path))
	}
	// Lifecycle commands run in the order the specification gives, whatever the file's order.
	order := []string{"onCreateCommand", "updateContentCommand", "postCreateCommand"}
	slices.SortStableFunc(s.Commands, func(a, b Command) int {
		return slices.Index(order, fieldOf(a.Field)) - slices.Index(order, fieldOf(b.Field))
	})
	return s, errors.Join(errs...)
}

// ProjectRoot is the folder a devcontainer.json at path belongs to: the one holding its
// .devcontainer folder, or its own folder.
func ProjectRoot(path string) string {
	dir := abs(filepath.Dir(path), ".")
	if filepath.Base(dir) == ".devcontainer" {
		return filepath.Dir(dir)
	}
	return dir
}

// Within reports whether p is root or inside it, by name (EvalSymlinks first to judge where a
// path really leads).
func Within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func fieldOf(f string) string { n, _, _ := strings.Cut(f, "."); return n }

func abs(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	a, err := filepath.Abs(filepath.Join(dir, p))
	if err != nil {
		return filepath.Join(dir, p)
	}
	return a
}

// port reads a forwardPorts entry: a number, or "HOST:PORT" naming the sandbox itself.
func port(raw json.RawMessage) (int, error) {
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		if n < 1 || n > 65535 {
			return 0, fmt.Errorf("%d is not a port (1-65535)", n)
		}
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("%s: want a port number or \"localhost:PORT\"", raw)
	}
	host, p, ok := strings.Cut(s, ":")
	if !ok || (host != "localhost" && host != "127.0.0.1" && host != "0.0.0.0") {
		return 0, fmt.Errorf("%q: only the sandbox's own ports can be forwarded (localhost:PORT)", s)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q: %q is not a port (1-65535)", s, p)
	}
	return n, nil
}

// commands reads a lifecycle field: a string (a shell line), a list (one command and its
// arguments), or an object of named commands of either kind (run one after another here, in
// name order, where a devcontainer runs them in parallel).
func commands(name string, line int, raw json.RawMessage) ([]Command, error) {
	one := func(field string, raw json.RawMessage) (Command, error) {
		var sh string
		if err := json.Unmarshal(raw, &sh); err == nil {
			if strings.TrimSpace(sh) == "" {
				return Command{}, errors.New("empty command")
			}
			return Command{Field: field, Line: line, Shell: sh}, nil
		}
		var argv []string
		if err := json.Unmarshal(raw, &argv); err == nil {
			if len(argv) == 0 || argv[0] == "" {
				return Command{}, errors.New("empty command")
			}
			return Command{Field: field, Line: line, Exec: argv}, nil
		}
		return Command{}, fmt.Errorf("want a command line, a list of arguments, or an object of them")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err == nil {
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		slices.Sort(names)
		var out []Command
		for _, k := range names {
			c, err := one(name+"."+k, obj[k])
			if err != nil {
				return nil, fmt.Errorf("%s: %v", k, err)
			}
			out = append(out, c)
		}
		return out, nil
	}
	c, err := one(name, raw)
	if err != nil {
		return nil, err
	}
	return []Command{c}, nil
}

// DockerfileFor returns the Dockerfile that builds the template: base (the content of the file
// Dockerfile names, or "" for Image) followed by the lifecycle commands, each a RUN as root,
// and a last USER that gives the image back to the sandbox user. BaseLines is how many lines
// of the result come from base, so a build error past them belongs to a command.
func (s Spec) DockerfileFor(base []byte, user string) (content []byte, baseLines int) {
	var b bytes.Buffer
	if s.Image != "" {
		fmt.Fprintf(&b, "FROM %s\n", s.Image)
	} else {
		b.Write(base)
		if len(base) > 0 && base[len(base)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	baseLines = bytes.Count(b.Bytes(), []byte("\n"))
	if len(s.Commands) > 0 {
		b.WriteString("USER 0:0\n")
		for _, c := range s.Commands {
			argv := c.Exec
			if argv == nil {
				argv = []string{"/bin/sh", "-c", c.Shell}
			}
			j, _ := json.Marshal(argv) // the exec form: any character survives
			fmt.Fprintf(&b, "RUN %s\n", j)
		}
	}
	fmt.Fprintf(&b, "USER %s\n", user)
	return b.Bytes(), baseLines
}

// CommandAt returns the command on line n of DockerfileFor's output, if one is there.
func (s Spec) CommandAt(n, baseLines int) (Command, bool) {
	i := n - baseLines - 2 // past the base and the USER line
	if len(s.Commands) == 0 || i < 0 || i >= len(s.Commands) {
		return Command{}, false
	}
	return s.Commands[i], true
}

// lineAt is the 1-based line of byte offset off in b.
func lineAt(b []byte, off int) int {
	off = min(max(off, 0), len(b))
	return bytes.Count(b[:off], []byte("\n")) + 1
}
