package e2e

import (
	"os"
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
	const node, network, bridge, chain = "e2ekeep", "airlock-e2ekeep", "airlock-e2ek", "AIRLOCK-e2ekeep"
	dir := t.TempDir()
	up := startUpstream(t)
	b, _ := os.ReadFile(writeConfig(t, dir, up))
	cfg := strings.NewReplacer(
		"node: "+testNode+"\n", "node: "+node+"\n",
		"name: airlock-e2e\n", "name: "+network+"\n",
		"bridge: "+testBridge+"\n", "bridge: "+bridge+"\n",
		testSubnet, "10.217.0.0/24",
	).Replace(string(b)) + "pool:\n  keep_on_stop: true\n"
	cfgPath := dir + "/keep.yaml"
	os.WriteFile(cfgPath, []byte(cfg), 0o600)
	containers := func() []string {
		out, _ := docker(t, "ps", "-aq", "--no-trunc", "--filter", "label=dev.airlock.node="+node)
		return strings.Fields(out)
	}
	t.Cleanup(func() {
		// keep_on_stop leaves everything by design; the test removes it.
		for _, id := range containers() {
			docker(t, "rm", "-f", id)
		}
		docker(t, "network", "rm", network)
		exec.Command("iptables", "-D", "INPUT", "-i", bridge, "-j", chain).Run()
		exec.Command("iptables", "-F", chain).Run()
		exec.Command("iptables", "-X", chain).Run()
	})

	n := startNode(t, dir+"/state", cfgPath)
	l := n.lease(t, "api.example.test")
	for i := 0; ; i++ {
		if out, _, _ := n.cli(t, "pools"); strings.Contains(out, "warm 2/2") || i > 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	warmBefore := containers()
	n.kill() // kill -9: no cleanup runs; its Redis (append-only file) dies with it

	// Down, the node keeps its sandboxes and their confinement.
	if left := containers(); len(left) != len(warmBefore) {
		t.Fatalf("stop with keep_on_stop removed sandboxes: %d of %d left", len(left), len(warmBefore))
	}
	if out, _ := exec.Command("iptables", "-S", chain).CombinedOutput(); !strings.Contains(string(out), "REJECT") {
		t.Fatalf("firewall rules removed while sandboxes are kept:\n%s", out)
	}
	orphan, err := docker(t, "run", "-d", "--label", "dev.airlock.managed=true", "--label", "dev.airlock.node="+node,
		"airlock/default:latest", "sleep", "infinity")
	if err != nil {
		t.Fatalf("starting an orphan container: %v %s", err, orphan)
	}
	orphan = strings.TrimSpace(orphan)

	n = startNode(t, dir+"/state", cfgPath)
	defer n.stop(t)
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
	deadline := time.Now().Add(10 * time.Second)
	for strings.Contains(strings.Join(containers(), " "), orphan) {
		if time.Now().After(deadline) {
			t.Fatalf("orphan container %.12s not destroyed", orphan)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
