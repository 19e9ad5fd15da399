package docker

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pool"
)

// TestKeeperIsOutOfTheSandboxsReach: code in a runc or crun sandbox, as its user, cannot reach its
// keeper's streams (the node's attachment, over which every command of the sandbox is framed):
// the keeper is undumpable from its start, so its files under /proc/1 (fd, mem, environ, root)
// do not open. The keeper runs with the
// hardening the idle main process it replaced had: no capabilities, no new privileges, a seccomp
// filter, the sandbox's user; the container's read-only root, dropped capabilities and pids limit
// are as before. crun runs the same spec, and must give the same answers (scripts/crun.sh
// registers it; `make deps` runs that).
func TestKeeperIsOutOfTheSandboxsReach(t *testing.T) {
	r := testRuntime(t)
	for _, rt := range []string{"runc", "crun"} {
		t.Run(rt, func(t *testing.T) { keeperOutOfReach(t, r, testTemplate(rt)) })
	}
}

func keeperOutOfReach(t *testing.T, r *Runtime, tmpl pool.Template) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if have, err := r.EngineRuntimes(ctx); err != nil {
		t.Fatal(err)
	} else if err := CannotRun(have, tmpl); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, r, tmpl)
	// Each line names what could be opened; none should be.
	got := runIn(t, r, sb, "sh", "-c", `
for f in /proc/1/fd/0 /proc/1/fd/1 /proc/1/fd/2 /proc/1/mem /proc/1/environ; do
  if (exec 3<$f) 2>/dev/null; then echo "read $f"; fi
  if (exec 3>>$f) 2>/dev/null; then echo "write $f"; fi
done
ls /proc/1/fd >/dev/null 2>&1 && echo "listed /proc/1/fd"
ls /proc/1/root/ >/dev/null 2>&1 && echo "listed /proc/1/root"
grep -E '^(Uid|NoNewPrivs|CapEff|CapPrm|CapBnd|Seccomp):' /proc/1/status | tr -s '\t ' ' '`)
	var reached []string
	status := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, "read ") && !strings.HasPrefix(line, "write ") {
			status[k] = strings.TrimSpace(v)
			continue
		}
		reached = append(reached, line)
	}
	if len(reached) > 0 {
		t.Errorf("code in the sandbox reached its keeper (PID 1): %q", reached)
	}
	want := map[string]string{"NoNewPrivs": "1", "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"CapBnd": "0000000000000000", "Seccomp": "2"}
	for k, v := range want {
		if status[k] != v {
			t.Errorf("the keeper's %s is %q, want %q (all of /proc/1/status read: %v)", k, status[k], v, status)
		}
	}
	if uid := strings.Fields(status["Uid"]); len(uid) == 0 || uid[0] != "10001" {
		t.Errorf("the keeper runs as uid %v, want the sandbox's user 10001", uid)
	}

	ins, err := r.cli.ContainerInspect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.HostConfig
	if !isKeeper(ins.Config) {
		t.Fatalf("a %s sandbox's main process is %v, not the keeper", tmpl.Runtime, ins.Config.Entrypoint)
	}
	if hc.Runtime != tmpl.Runtime {
		t.Errorf("the sandbox runs under %q, want %q", hc.Runtime, tmpl.Runtime)
	}
	if !hc.ReadonlyRootfs || !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Contains(hc.SecurityOpt, "no-new-privileges") ||
		hc.PidsLimit == nil || *hc.PidsLimit != tmpl.Pids || ins.Config.User != "10001:10001" || hc.Privileged {
		t.Errorf("the keeper's sandbox lost hardening: read-only root %v, cap drop %v, security options %v, pids limit %v, user %q, privileged %v",
			hc.ReadonlyRootfs, hc.CapDrop, hc.SecurityOpt, hc.PidsLimit, ins.Config.User, hc.Privileged)
	}
}
