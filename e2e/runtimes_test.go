package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// TestGVisorTier: a template under gVisor's runsc (registered by `make runsc`) is leased like
// any other, runs a user-space kernel, and keeps the invariants a sandbox relies on: the one
// way out, the injected credential it never sees, the redirect for clients that ignore the
// proxy, and what the agent writes runs. (The whole suite under both runtimes is issue 13.)
func TestGVisorTier(t *testing.T) {
	n := sharedNode(t)
	hostIP := n.spec.hostIP()
	a := n.leaseWith(t, "--template", "gvisor", "--allow", "api.example.test=demo")
	out, errs, code := n.exec(t, a.ID, "uname", "-r")
	if code != 0 || !strings.Contains(out, "gvisor") {
		t.Fatalf("uname -r under the gvisor template: exit %d %q %s", code, out, errs)
	}
	if out, errs, code := n.exec(t, a.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
		t.Fatalf("through the gateway: exit %d %q %s", code, out, errs)
	}
	if seen := n.up.seen(); seen[len(seen)-1] != "Bearer "+n.demoSecret(t) {
		t.Errorf("the upstream saw %q, want the injected credential", seen[len(seen)-1])
	}
	if out, errs, code := n.exec(t, a.ID, "curl", "--noproxy", "*", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
		t.Errorf("without the proxy, through the redirect: exit %d %q %s", code, out, errs)
	}
	if out, _, _ := n.exec(t, a.ID, "curl", "-sS", "http://evil.example/"); !strings.Contains(out, "denied by rule scope-miss") {
		t.Errorf("a host outside the scopes: %q", out)
	}
	if out, code := n.tcpProbe(t, a.ID, hostIP, 3128); code != 0 || !strings.Contains(out, "connected") {
		t.Fatalf("the gateway's port is not reachable from gVisor (the probe's control): %s", out)
	}
	if out, code := n.tcpProbe(t, a.ID, hostIP, 8443); code == 0 || strings.Contains(out, "connected") {
		t.Errorf("another port of the host is reachable from gVisor: %s", out)
	}
	if out, errs, code := n.exec(t, a.ID, "sh", "-c", `cd /workspace && printf '#!/bin/sh\necho ran\n' > x && chmod +x x && ./x && id -u`); code != 0 || out != "ran\n10001\n" {
		t.Errorf("a script in the workspace: exit %d %q %s", code, out, errs)
	}
	out, errs, code = n.cli(t, "verify", "--template", "gvisor")
	if code != 0 || !strings.Contains(out, "runtime runsc/systrap, kernel 4.19.0-gvisor") || !strings.Contains(out, "checks passed") {
		t.Errorf("airlock verify --template gvisor: exit %d\n%s\n%s", code, out, errs)
	}
	if out, _, _ := n.cli(t, "pools"); !strings.Contains(out, "gvisor") || !regexp.MustCompile(`gvisor +node \S+ +runtime runsc/systrap `).MatchString(out) {
		t.Errorf("airlock pools does not show the gvisor template's runtime:\n%s", out)
	}
	// The other platform registered, ptrace, is an engine runtime of its own, started cold.
	p := n.leaseWith(t, "--template", "gvisor-ptrace", "--allow", "api.example.test=demo")
	if out, err := docker("inspect", "--format", "{{.HostConfig.Runtime}}", p.Sandbox); err != nil || strings.TrimSpace(out) != "runsc-ptrace" {
		t.Errorf("the gvisor-ptrace sandbox runs under %q (%v), want runsc-ptrace", out, err)
	}
	if out, errs, code := n.exec(t, p.ID, "sh", "-c", "uname -r && curl -sS https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "gvisor") || !strings.Contains(out, "whoami ok") {
		t.Errorf("under ptrace, uname and a request through the gateway: exit %d %q %s", code, out, errs)
	}
	if out, _, _ := n.cli(t, "pools"); !regexp.MustCompile(`gvisor-ptrace +node \S+ +runtime runsc/ptrace `).MatchString(out) {
		t.Errorf("airlock pools does not show the ptrace platform:\n%s", out)
	}
	// gVisor's netstack has no IPv6 sysctls; what matters is that no IPv6 address is up.
	if out, _, _ := n.exec(t, a.ID, "sh", "-c", "ip -6 addr 2>/dev/null | grep inet6 || true"); strings.TrimSpace(out) != "" {
		t.Errorf("IPv6 addresses under gVisor:\n%s", out)
	}
}
