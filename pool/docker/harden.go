package docker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/airlock-dev/airlock/pool"
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
	case strings.HasPrefix(t.Image, "airlock/") && slices.Contains(ShippedImages, strings.TrimSuffix(strings.TrimPrefix(t.Image, "airlock/"), ":latest")):
		return "run `airlock image build " + strings.TrimSuffix(strings.TrimPrefix(t.Image, "airlock/"), ":latest") + "`"
	}
	return "build or load it (no registry is reached, nothing is pulled)"
}

// hardeningProbe runs in the image as root with no network and no capability but reading
// every file, and prints one line per problem.
const hardeningProbe = `uid=$1
grep -q "^[^:]*:[^:]*:$uid:" /etc/passwd || echo "user: no account has uid $uid in /etc/passwd, so tools that look the user up fail"
[ -d /etc/airlock ] || echo "mount point: /etc/airlock is not a directory; the gateway's CA bundle is mounted there"
for c in sleep bash; do command -v "$c" >/dev/null 2>&1 || echo "command: $c is missing; the sandbox idles in sleep under Docker's init and its health probe runs bash"; done
if command -v find >/dev/null 2>&1; then
	find / -xdev -type f \( -perm -4000 -o -perm -2000 \) 2>/dev/null | head -20 | sed 's/^/setuid: /'
else
	echo "command: find is missing, so setuid files cannot be looked for"
fi
`

// CheckImage checks image (an id) against what every sandbox relies on: the template's user
// (UID:GID) exists, no setuid or setgid file, the /etc/airlock mount point, sleep and bash for
// the init's idle command and the health probe, and no declared volume (which would be
// writable disk outside the read-only root and the tmpfs caps). It returns one error listing
// every problem.
func CheckImage(ctx context.Context, cli *client.Client, image, user string) error {
	ins, err := cli.ImageInspect(ctx, image)
	if err != nil {
		return fmt.Errorf("docker: inspect %s: %w", image, err)
	}
	var problems []string
	if ins.Config != nil && len(ins.Config.Volumes) > 0 {
		problems = append(problems, fmt.Sprintf("volumes: the image declares %s; a volume is disk outside the read-only root and the workspace caps",
			strings.Join(slices.Sorted(maps.Keys(ins.Config.Volumes)), ", ")))
	}
	uid, _, err := pool.ParseUser(user)
	if err != nil {
		return err
	}
	out, err := probe(ctx, cli, image, []string{"/bin/sh", "-c", hardeningProbe, "probe", fmt.Sprint(uid)})
	if err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			problems = append(problems, l)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("fails the sandbox hardening checks:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

var probePids int64 = 64

// probe runs argv in a throwaway container of image, as root with no network, a read-only
// root and only the capability to read every file, and returns what it printed.
func probe(ctx context.Context, cli *client.Client, image string, argv []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image: image, User: "0:0", Entrypoint: argv[:1], Cmd: argv[1:], NetworkDisabled: true,
		Labels: map[string]string{LabelManaged: "true", LabelCheck: "true"},
	}, &container.HostConfig{
		NetworkMode: "none", CapDrop: []string{"ALL"}, CapAdd: []string{"DAC_READ_SEARCH"},
		SecurityOpt: []string{"no-new-privileges"}, ReadonlyRootfs: true,
		Resources: container.Resources{Memory: 256 << 20, PidsLimit: &probePids},
	}, nil, nil, "")
	if err != nil {
		return "", fmt.Errorf("docker: the hardening probe: %w", err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return "", fmt.Errorf("the hardening probe could not start (the image needs /bin/sh): %w", err)
	}
	var code int64
	select {
	case w := <-waitC:
		code = w.StatusCode
	case err := <-errC:
		return "", fmt.Errorf("docker: waiting for the hardening probe: %w", err)
	}
	logs, err := cli.ContainerLogs(ctx, created.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", fmt.Errorf("docker: the hardening probe's output: %w", err)
	}
	defer logs.Close()
	var stdout, stderr strings.Builder
	if _, err := stdcopy.StdCopy(&stdout, &stderr, logs); err != nil {
		return "", fmt.Errorf("docker: the hardening probe's output: %w", err)
	}
	if code != 0 {
		return "", fmt.Errorf("the hardening probe failed: exit %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
