package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKeepOnStopAdoptsSandboxes runs a node that keeps its sandboxes, kills it with SIGKILL and
// starts it again: the lease record survived, the lease works, warm sandboxes are adopted, the
// sandbox stayed confined while the node was down, and a container no record refers to is
// destroyed.
func TestKeepOnStopAdoptsSandboxes(t *testing.T) {
	spec := nodeSpec{Name: "e2ekeep", Network: "airlock-e2ekeep", Bridge: "airlock-e2ek", Subnet: "10.217.0.0/24", MinWarm: 2,
		Extra: "pool:\n  keep_on_stop: true\n"}
	dir := t.TempDir()
	cfgPath, err := spec.write(dir, startUpstream(t))
	if err != nil {
		t.Fatal(err)
	}
	containers := func() []string {
		out, _ := docker("ps", "-aq", "--no-trunc", "--filter", "label=dev.airlock.node="+spec.Name)
		return strings.Fields(out)
	}
	t.Cleanup(func() {
		// keep_on_stop leaves everything by design; the test removes it.
		for _, id := range containers() {
			docker("rm", "-f", id)
		}
		docker("network", "rm", spec.Network)
		exec.Command("iptables", "-D", "INPUT", "-i", spec.Bridge, "-j", spec.chain()).Run()
		exec.Command("iptables", "-F", spec.chain()).Run()
		exec.Command("iptables", "-X", spec.chain()).Run()
		exec.Command("iptables", "-t", "nat", "-D", "PREROUTING", "-i", spec.Bridge, "-j", spec.chain()).Run()
		exec.Command("iptables", "-t", "nat", "-F", spec.chain()).Run()
		exec.Command("iptables", "-t", "nat", "-X", spec.chain()).Run()
	})

	n := startNode(t, spec, dir+"/state", cfgPath)
	l := n.lease(t, "api.example.test")
	eventually(t, 30*time.Second, "the pool to be warm at its target again", func() bool {
		_, ok, _ := n.settled(t, "default")
		return ok
	})
	warmBefore := containers()
	n.kill() // kill -9: no cleanup runs; its Redis (append-only file) dies with it

	// Down, the node keeps its sandboxes and their confinement.
	if left := containers(); len(left) != len(warmBefore) {
		t.Fatalf("stop with keep_on_stop removed sandboxes: %d of %d left", len(left), len(warmBefore))
	}
	if out, _ := exec.Command("iptables", "-S", spec.chain()).CombinedOutput(); !strings.Contains(string(out), "REJECT") {
		t.Fatalf("firewall rules removed while sandboxes are kept:\n%s", out)
	}
	orphan, err := docker("run", "-d", "--label", "dev.airlock.managed=true", "--label", "dev.airlock.node="+spec.Name,
		"airlock/default:latest", "sleep", "infinity")
	if err != nil {
		t.Fatalf("starting an orphan container: %v %s", err, orphan)
	}
	orphan = strings.TrimSpace(orphan)

	n = startNode(t, spec, dir+"/state", cfgPath)
	out, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami")
	if code != 0 || !strings.Contains(out, "whoami ok") {
		t.Fatalf("the lease did not survive the restart: exit %d %s %s", code, out, errs)
	}
	now := strings.Join(containers(), " ")
	for _, id := range warmBefore {
		if !strings.Contains(now, id) {
			t.Errorf("sandbox %.12s was not adopted", id)
		}
	}
	eventually(t, 10*time.Second, "the orphan container "+orphan[:12]+" to be destroyed", func() bool {
		return !strings.Contains(strings.Join(containers(), " "), orphan)
	})
}
