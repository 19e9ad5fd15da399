package docker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/inside"
)

// checked remembers CheckImage's verdict per image id and user, so the pool may ask often.
type checked struct {
	mu sync.Mutex
	m  map[string]error
}

// Image resolves t.Image on the engine and checks the image against the hardening, once per id:
// a template whose image is missing or fails gets no sandboxes, and the error says why.
func (r *Runtime) Image(ctx context.Context, t pool.Template) (string, error) {
	ins, err := r.cli.ImageInspect(ctx, t.Image)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return "", fmt.Errorf("image %s is not on this engine: %s", t.Image, buildHint(t))
		}
		return "", fmt.Errorf("docker: inspect %s: %w", t.Image, err)
	}
	key := ins.ID + "|" + t.User
	r.checks.mu.Lock()
	verdict, ok := r.checks.m[key]
	r.checks.mu.Unlock()
	if !ok {
		verdict = CheckImage(ctx, r.cli, ins.ID, t.User)
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var he *HardeningError
		if verdict != nil && !errors.As(verdict, &he) {
			return "", verdict // the engine failed, not the image: ask again next time
		}
		r.checks.mu.Lock()
		if r.checks.m == nil {
			r.checks.m = map[string]error{}
		}
		r.checks.m[key] = verdict
		r.checks.mu.Unlock()
	}
	if verdict != nil {
		return "", fmt.Errorf("image %s (%s): %w", t.Image, short(ins.ID), verdict)
	}
	return ins.ID, nil
}

func buildHint(t pool.Template) string {
	switch {
	case t.Built():
		return "run `airlock template build " + t.Name + "`"
	case strings.HasPrefix(t.Image, "airlock/") && slices.Contains(inside.ShippedImages, strings.TrimSuffix(strings.TrimPrefix(t.Image, "airlock/"), ":latest")):
		return "run `airlock image build " + strings.TrimSuffix(strings.TrimPrefix(t.Image, "airlock/"), ":latest") + "`"
	}
	return "build or load it (no registry is reached, nothing is pulled)"
}

// CheckImage checks image (an id) against what every sandbox relies on: the template's user
// (UID:GID) has an account, no setuid or setgid file, the /etc/airlock mount point, sleep and
// bash for the init's idle command and the health probe, and no declared volume (which would
// be writable disk outside the read-only root and the tmpfs caps). It reads the image's files
// from outside, through an export of a container that is created and never started, so no
// program of the image runs and none can lie about what is there. It returns one error
// listing every problem.
func CheckImage(ctx context.Context, cli *client.Client, image, user string) error {
	ins, err := cli.ImageInspect(ctx, image)
	if err != nil {
		return fmt.Errorf("docker: inspect %s: %w", image, err)
	}
	uid, _, err := pool.ParseUser(user)
	if err != nil {
		return err
	}
	var problems []string
	if ins.Config != nil && len(ins.Config.Volumes) > 0 {
		problems = append(problems, fmt.Sprintf("volumes: the image declares %s; a volume is disk outside the read-only root and the workspace caps",
			strings.Join(slices.Sorted(maps.Keys(ins.Config.Volumes)), ", ")))
	}
	fsProblems, err := scanImage(ctx, cli, image, uid)
	if err != nil {
		return err
	}
	problems = append(problems, fsProblems...)
	if len(problems) > 0 {
		return &HardeningError{Problems: problems}
	}
	return nil
}

// HardeningError is CheckImage's verdict on an image that fails, one line per problem.
type HardeningError struct{ Problems []string }

func (e *HardeningError) Error() string {
	return "fails the sandbox hardening checks:\n  " + strings.Join(e.Problems, "\n  ")
}

// scanImage reads image's file system as a tar stream and returns what is wrong in it.
func scanImage(ctx context.Context, cli *client.Client, image string, uid uint32) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image: image, Entrypoint: []string{"/nonexistent"}, NetworkDisabled: true,
		Labels: map[string]string{LabelManaged: "true", LabelCheck: "true"},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return nil, fmt.Errorf("docker: a container to read the image from: %w", err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
	rc, err := cli.ContainerExport(ctx, created.ID)
	if err != nil {
		return nil, fmt.Errorf("docker: reading the image's files: %w", err)
	}
	defer rc.Close()
	return scanTree(rc, uid)
}

// scanTree checks a root file system given as a tar stream.
func scanTree(r io.Reader, uid uint32) ([]string, error) {
	var problems, setuid []string
	var passwd []byte
	found := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the image's files: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		found[name] = true
		if h.Typeflag == tar.TypeDir {
			found[name+"/"] = true
		}
		if m := h.FileInfo().Mode(); m.IsRegular() && m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			setuid = append(setuid, "/"+name)
		}
		if name == "etc/passwd" && h.FileInfo().Mode().IsRegular() {
			if passwd, err = io.ReadAll(io.LimitReader(tr, 1<<20)); err != nil {
				return nil, fmt.Errorf("reading the image's /etc/passwd: %w", err)
			}
		}
	}
	if !hasAccount(passwd, uid) {
		problems = append(problems, fmt.Sprintf("user: no account has uid %d in /etc/passwd, so tools that look the user up fail", uid))
	}
	if !found["etc/airlock/"] {
		problems = append(problems, "mount point: /etc/airlock is not a directory; the gateway's CA bundle is mounted there")
	}
	for _, c := range []string{"sleep", "bash"} {
		if !found["bin/"+c] && !found["usr/bin/"+c] && !found["usr/local/bin/"+c] {
			problems = append(problems, fmt.Sprintf("command: %s is missing; the sandbox idles in sleep under Docker's init and its health probe runs bash", c))
		}
	}
	slices.Sort(setuid)
	for i, f := range setuid {
		if i == 20 {
			problems = append(problems, fmt.Sprintf("setuid: and %d more", len(setuid)-20))
			break
		}
		problems = append(problems, "setuid: "+f)
	}
	return problems, nil
}

// hasAccount reports whether passwd (an /etc/passwd) has an entry for uid.
func hasAccount(passwd []byte, uid uint32) bool {
	want := fmt.Sprint(uid)
	for _, l := range strings.Split(string(passwd), "\n") {
		if f := strings.Split(l, ":"); len(f) >= 3 && f[2] == want {
			return true
		}
	}
	return false
}
