package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/devcontainer"
)

// builtDockerfile is the name the Dockerfile of a build goes by in the context sent to the
// engine: the template's own, or the one made from a devcontainer.json.
const builtDockerfile = ".airlock.Dockerfile"

// source is what a template is built from.
type source struct {
	dockerfile []byte
	file       string // the Dockerfile's path, for errors ("" when a devcontainer names an image)
	context    string
	args       map[string]string
	dc         *devcontainer.Spec
	baseLines  int // lines of dockerfile that come from file; the rest from dc
}

func sourceOf(t pool.Template) (source, error) {
	switch {
	case t.Devcontainer != "":
		spec, err := devcontainer.Load(t.Devcontainer)
		if err != nil {
			return source{}, err
		}
		s := source{dc: &spec, context: spec.Context, args: spec.Args, file: spec.Dockerfile}
		if spec.Dockerfile != "" {
			// Where the paths really lead, links followed, stays inside the project too.
			root, err := filepath.EvalSymlinks(devcontainer.ProjectRoot(spec.Path))
			if err != nil {
				return source{}, fmt.Errorf("%s: %w", spec.Path, err)
			}
			for _, p := range []string{spec.Dockerfile, spec.Context} {
				real, err := filepath.EvalSymlinks(p)
				if err != nil {
					return source{}, fmt.Errorf("%s:%d: build: %w", spec.Path, spec.Line, err)
				}
				if !devcontainer.Within(root, real) {
					return source{}, fmt.Errorf("%s:%d: build: %s leads to %s, outside the project %s", spec.Path, spec.Line, p, real, root)
				}
			}
		}
		var base []byte
		if spec.Dockerfile != "" {
			if base, err = os.ReadFile(spec.Dockerfile); err != nil {
				return source{}, fmt.Errorf("%s:%d: build.dockerfile: %w", spec.Path, spec.Line, err)
			}
		} else {
			s.context = filepath.Dir(spec.Path)
		}
		s.dockerfile, s.baseLines = spec.DockerfileFor(base, t.User)
		return s, nil
	case t.Build != nil:
		file, ctxDir := t.Build.Dockerfile, t.Build.Context
		if ctxDir == "" {
			ctxDir = filepath.Dir(file)
		}
		if file == "" {
			file = filepath.Join(ctxDir, "Dockerfile")
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return source{}, fmt.Errorf("template %s: build.dockerfile: %w", t.Name, err)
		}
		return source{dockerfile: b, file: file, context: ctxDir, args: t.Build.Args, baseLines: bytes.Count(b, []byte("\n")) + 1}, nil
	}
	return source{}, fmt.Errorf("template %s is not built: it names no build or devcontainer", t.Name)
}

// Notes returns what the template's devcontainer.json says airlock ignores, one line each.
func Notes(t pool.Template) []string {
	if t.Devcontainer == "" {
		return nil
	}
	spec, err := devcontainer.Load(t.Devcontainer)
	if err != nil {
		return nil
	}
	return spec.Ignored
}

// BuildTemplate builds t's image on the engine from its Dockerfile or devcontainer.json,
// writing the build's progress to w, checks the result against the hardening (CheckImage) and
// only then tags it t.Image, so a pool never sees an image that failed. It returns the image
// id. Nothing is pulled: FROM must name an image the engine has. An error names the file and
// line it comes from.
func BuildTemplate(ctx context.Context, cli *client.Client, t pool.Template, w io.Writer) (string, error) {
	src, err := sourceOf(t)
	if err != nil {
		return "", err
	}
	if src.file != "" {
		if err := checkDockerfile(src.file, src.dockerfile[:lineOffset(src.dockerfile, src.baseLines)]); err != nil {
			return "", err
		}
	}
	// The engine would try to pull a base it lacks: every FROM must name one it has.
	for _, f := range froms(src.dockerfile, src.args) {
		if f.image == "" {
			return "", src.at(f.line, "FROM "+f.raw+": a base named with a variable that no ARG default or build argument gives cannot be checked; name the image")
		}
		if _, err := cli.ImageInspect(ctx, f.image); err != nil {
			if errdefs.IsNotFound(err) {
				return "", src.at(f.line, "FROM "+f.image+": this engine has no such image, and nothing is pulled (no registry is reachable); "+
					"start from one it has, such as airlock/default, airlock/python or airlock/node")
			}
			return "", fmt.Errorf("docker: inspect %s: %w", f.image, err)
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarContext(pw, src.context, src.dockerfile)) }()
	defer pr.Close()
	var nonce [6]byte
	rand.Read(nonce[:])
	repo, _, _ := strings.Cut(t.Image, ":")
	candidate := repo + ":candidate-" + hex.EncodeToString(nonce[:])
	args := map[string]*string{}
	for k, v := range src.args {
		args[k] = &v
	}
	resp, err := cli.ImageBuild(ctx, pr, build.ImageBuildOptions{
		Tags: []string{candidate}, Dockerfile: builtDockerfile, Remove: true, ForceRemove: true,
		BuildArgs: args, Labels: map[string]string{LabelManaged: "true", LabelTemplate: t.Name},
		Version: build.BuilderV1, NetworkMode: buildNetwork(t),
	})
	if err != nil {
		if g := parseLine.FindStringSubmatch(err.Error()); g != nil {
			n, _ := strconv.Atoi(g[1])
			return "", fmt.Errorf("template %s: %w", t.Name, src.at(n, strings.TrimPrefix(err.Error(), "Error response from daemon: ")))
		}
		return "", fmt.Errorf("docker: build %s: %w", t.Name, err)
	}
	defer resp.Body.Close()
	if err := src.follow(resp.Body, w); err != nil {
		return "", fmt.Errorf("template %s: %w", t.Name, err)
	}
	built, err := cli.ImageInspect(ctx, candidate)
	if err != nil {
		return "", fmt.Errorf("docker: the built image: %w", err)
	}
	fmt.Fprintf(w, "checking %s against the sandbox hardening\n", short(built.ID))
	if err := CheckImage(ctx, cli, built.ID, t.User); err != nil {
		cli.ImageRemove(context.WithoutCancel(ctx), candidate, image.RemoveOptions{PruneChildren: true})
		return "", fmt.Errorf("template %s: the image built from %s %w", t.Name, src.origin(), err)
	}
	old, oerr := cli.ImageInspect(ctx, t.Image)
	if err := cli.ImageTag(ctx, built.ID, t.Image); err != nil {
		return "", fmt.Errorf("docker: tag %s: %w", t.Image, err)
	}
	cli.ImageRemove(context.WithoutCancel(ctx), candidate, image.RemoveOptions{})
	if oerr == nil && old.ID != built.ID {
		// The old image goes once nothing runs from it (the engine refuses while a sandbox does).
		cli.ImageRemove(context.WithoutCancel(ctx), old.ID, image.RemoveOptions{PruneChildren: true})
	} else if oerr != nil && !errdefs.IsNotFound(oerr) {
		return "", fmt.Errorf("docker: inspect %s: %w", t.Image, oerr)
	}
	fmt.Fprintf(w, "template %s: %s is %s\n", t.Name, t.Image, short(built.ID))
	return built.ID, nil
}

// buildNetwork is the network t's RUN steps get: none unless the template asks for the
// builder's bridge.
func buildNetwork(t pool.Template) string {
	if t.BuildNetwork == "default" {
		return "default"
	}
	return "none"
}

func (s source) origin() string {
	if s.dc != nil {
		return s.dc.Path
	}
	return s.file
}

// message is one line of the engine's build stream.
type message struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	Error       string `json:"error"`
	ErrorDetail struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

var (
	stepLine  = regexp.MustCompile(`^Step (\d+)/\d+ : `)
	parseLine = regexp.MustCompile(`(?i)\bline (\d+)\b`)
)

// follow copies the build's progress to w and turns its error, if any, into one naming the
// file and line it comes from.
func (s source) follow(body io.Reader, w io.Writer) error {
	dec := json.NewDecoder(body)
	step := 0
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("docker: the build stream: %w", err)
		}
		if m.Stream != "" {
			io.WriteString(w, m.Stream)
			if g := stepLine.FindStringSubmatch(m.Stream); g != nil {
				step, _ = strconv.Atoi(g[1])
			}
		} else if m.Status != "" {
			fmt.Fprintln(w, m.Status)
		}
		if msg := cmp(m.ErrorDetail.Message, m.Error); msg != "" {
			line := 0
			if g := parseLine.FindStringSubmatch(msg); g != nil {
				line, _ = strconv.Atoi(g[1])
			} else if step > 0 {
				if starts := instructions(s.dockerfile); step <= len(starts) {
					line = starts[step-1]
				}
			}
			return s.at(line, msg)
		}
	}
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// at names where line n of the Dockerfile sent to the engine comes from.
func (s source) at(n int, msg string) error {
	if s.dc != nil {
		if c, ok := s.dc.CommandAt(n, s.baseLines); ok {
			return fmt.Errorf("%s:%d: %s failed at build time: %s", s.dc.Path, c.Line, c.Field, msg)
		}
		if s.dc.Image != "" || n > s.baseLines {
			return fmt.Errorf("%s:%d: %s", s.dc.Path, s.dc.Line, msg)
		}
	}
	if n > 0 {
		return fmt.Errorf("%s:%d: %s", s.file, n, msg)
	}
	return fmt.Errorf("%s: %s", s.origin(), msg)
}

// instructions returns the 1-based line on which each instruction of a Dockerfile starts,
// following line continuations and skipping comments and blank lines (the engine counts
// instructions as its build steps).
func instructions(df []byte) []int {
	var starts []int
	cont := false
	for i, l := range strings.Split(string(df), "\n") {
		t := strings.TrimSpace(l)
		if !cont && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if !cont {
			starts = append(starts, i+1)
		}
		cont = strings.HasSuffix(t, "\\")
	}
	return starts
}

// checkDockerfile refuses what the engine would only report without a line: a Dockerfile with
// no instruction, or whose first is not FROM (or ARG before it).
func checkDockerfile(file string, df []byte) error {
	starts := instructions(df)
	if len(starts) == 0 {
		return fmt.Errorf("%s: no instructions", file)
	}
	lines := strings.Split(string(df), "\n")
	for _, n := range starts {
		word, _, _ := strings.Cut(strings.TrimSpace(lines[n-1]), " ")
		switch strings.ToUpper(word) {
		case "ARG":
			continue
		case "FROM":
			return nil
		default:
			return fmt.Errorf("%s:%d: the first instruction must be FROM (an image this engine has, such as airlock/default), not %s", file, n, word)
		}
	}
	return fmt.Errorf("%s: no FROM", file)
}

// from is one FROM of a Dockerfile: the image it names (after ARG substitution; "" when a
// variable is left), or nothing for scratch and an earlier stage.
type from struct {
	line       int
	raw, image string
}

var argRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// froms returns the base images df starts its stages from, with the ARGs declared before the
// first FROM (their defaults, or args) substituted, as the engine would.
func froms(df []byte, args map[string]string) []from {
	lines := strings.Split(string(df), "\n")
	vars := map[string]string{}
	stages := map[string]bool{}
	var out []from
	seenFrom := false
	for _, n := range instructions(df) {
		fields := strings.Fields(lines[n-1])
		if len(fields) < 2 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "ARG":
			if seenFrom {
				continue
			}
			name, def, _ := strings.Cut(fields[1], "=")
			if v, ok := args[name]; ok {
				def = v
			}
			vars[name] = strings.Trim(def, `"'`)
		case "FROM":
			seenFrom = true
			rest := fields[1:]
			for len(rest) > 0 && strings.HasPrefix(rest[0], "--") {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				continue
			}
			raw := rest[0]
			img, unresolved := raw, false
			img = argRef.ReplaceAllStringFunc(img, func(ref string) string {
				v, ok := vars[argRef.FindStringSubmatch(ref)[1]]
				if !ok || v == "" {
					unresolved = true
				}
				return v
			})
			switch {
			case unresolved:
				out = append(out, from{line: n, raw: raw})
			case img == "scratch" || stages[strings.ToLower(img)]:
			default:
				out = append(out, from{line: n, raw: raw, image: img})
			}
			if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") {
				stages[strings.ToLower(rest[2])] = true // later stages may start from this one
			}
		}
	}
	return out
}

func lineOffset(b []byte, lines int) int {
	off := 0
	for range lines {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			return len(b)
		}
		off += i + 1
	}
	return off
}

// tarContext writes dir as a build context to w, leaving out what its .dockerignore names (the
// engine's own matching), with dockerfile added as builtDockerfile. Symbolic links go in as
// links, never followed.
func tarContext(w io.Writer, dir string, dockerfile []byte) error {
	var pm *patternmatcher.PatternMatcher
	if f, err := os.Open(filepath.Join(dir, ".dockerignore")); err == nil {
		patterns, err := ignorefile.ReadAll(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, ".dockerignore"), err)
		}
		if pm, err = patternmatcher.New(patterns); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, ".dockerignore"), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == builtDockerfile {
			return nil
		}
		if pm != nil {
			if skip, err := pm.MatchesOrParentMatches(rel); err != nil {
				return err
			} else if skip && !(d.IsDir() && pm.Exclusions()) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			} else if skip {
				return nil // a folder left out may hold a file put back with !
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("build context %s: %w", p, err)
		}
		h.Name = rel
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: path.Clean(builtDockerfile), Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(dockerfile); err != nil {
		return err
	}
	return tw.Close()
}
