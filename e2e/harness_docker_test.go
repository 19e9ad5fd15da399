package e2e

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// This file is the Docker engine and the host a node runs on: the containers it labels as its own,
// and what a stopped node must not leave behind (containers, network, firewall chain, processes).

// managedContainers is every container the node labelled as its own.
func (n *nodeProc) managedContainers(t *testing.T) []string {
	t.Helper()
	out, err := docker("ps", "-aq", "--no-trunc", "--filter", "label=dev.airlock.node="+n.spec.Name)
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return strings.Fields(out)
}

// leftovers names what a stopped node left behind: containers, network, firewall chain, child
// processes.
func (n *nodeProc) leftovers() []string {
	var left []string
	if out, _ := docker("ps", "-aq", "--filter", "label=dev.airlock.node="+n.spec.Name); strings.TrimSpace(out) != "" {
		left = append(left, "containers: "+strings.Join(strings.Fields(out), " "))
	}
	// By exact name: the engine's filter matches a part of a name, and another node's network
	// or chain may begin with this one's (airlock-e2e-caches).
	if out, _ := docker("network", "ls", "--format", "{{.Name}}", "--filter", "name="+n.spec.Network); slices.Contains(strings.Fields(out), n.spec.Network) {
		left = append(left, "network "+n.spec.Network)
	}
	for _, table := range []string{"filter", "nat"} {
		out, _ := exec.Command("iptables", "-t", table, "-S").CombinedOutput()
		if slices.ContainsFunc(strings.Split(string(out), "\n"), func(l string) bool { return slices.Contains(strings.Fields(l), n.spec.chain()) }) {
			left = append(left, "firewall chain "+n.spec.chain()+" in table "+table)
		}
	}
	if out, _ := exec.Command("pgrep", "-af", n.state).CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		left = append(left, "child processes:\n"+string(out))
	}
	return left
}

// checkClean asserts that the stopped node left nothing behind.
func (n *nodeProc) checkClean(t *testing.T) {
	t.Helper()
	for _, l := range n.leftovers() {
		t.Errorf("left after stop: %s", l)
	}
}

func docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}
