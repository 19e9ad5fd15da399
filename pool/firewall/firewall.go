// Package firewall confines what a node's sandboxes reach, in the kernel of the host (or
// Kubernetes node) they run on: whatever a sandbox sends, it may reach only the node's gateway
// and resolver. Both backends use it: Docker for the sandbox bridge, Kubernetes for the node's
// pod network.
package firewall

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
)

// Firewall confines the packets of the sandboxes (those arriving on Bridge, or sent from
// Source): they may reach only the gateway's TCP ports and the resolver's port at Host;
// everything else is rejected, so a wrongly bound host service stays out of reach. TCP to ports
// 80 and 443 of any address is redirected to the gateway (see Transparent). On Docker the
// internal network already keeps sandboxes off other networks and away from each other, so
// only what they send to the host itself (INPUT) is filtered; a Kubernetes pod network is
// routed, so Forward filters what the node would route for them too (to other hosts, and to
// other pods where the bridge passes through the firewall).
type Firewall struct {
	Chain string // e.g. "AIRLOCK-node1"; at most 28 characters
	// Bridge or Source says which packets are the sandboxes': those arriving on the interface
	// Bridge, or those from the network Source. Exactly one is set.
	Bridge string
	Source netip.Prefix
	// Ports, with Bridge, also names the bridge's ports as an iptables interface pattern (the
	// host ends the node wires, e.g. "al+"): a port taken off its bridge (the engine removed
	// the network under it) hands its packets to the host as itself, not as the bridge, and
	// they are the sandboxes' still.
	Ports string
	// Forward also filters the packets the node routes for the sandboxes.
	Forward bool
	// Netns, when set, is the network namespace (a name under /run/netns) the rules are made
	// in: the Kubernetes node's, where it is not the one airlock runs in.
	Netns   string
	Host    netip.Addr
	Gateway int // gateway TCP port
	DNS     int // resolver port, UDP and TCP
	// Transparent, when set, is the gateway's port for redirected connections: TCP to ports
	// 80 and 443 of any address, from clients that ignore the proxy, is redirected there (a
	// chain of the same name in the nat table), so it leaves the one way as well.
	Transparent int
}

// redirectedPorts are the destination ports of the connections redirected to the gateway.
var redirectedPorts = []string{"80", "443"}

func (f *Firewall) rules() [][]string {
	h := f.Host.String() + "/32"
	return [][]string{
		// Replies to connections the host opened (an exposed port under review). Conntrack
		// decides: a sandbox cannot open a new connection through this rule.
		{"-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
		{"-p", "tcp", "-d", h, "--dport", strconv.Itoa(f.Gateway), "-j", "ACCEPT"},
		{"-p", "udp", "-d", h, "--dport", strconv.Itoa(f.DNS), "-j", "ACCEPT"},
		{"-p", "tcp", "-d", h, "--dport", strconv.Itoa(f.transparentPort()), "-j", "ACCEPT"},
		{"-p", "tcp", "-d", h, "--dport", strconv.Itoa(f.DNS), "-j", "ACCEPT"},
		{"-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"-j", "REJECT", "--reject-with", "icmp-port-unreachable"},
	}
}

// transparentPort is the port the filter rules open for redirected connections: the gateway's
// own when there is no redirect (a rule that changes nothing).
func (f *Firewall) transparentPort() int {
	if f.Transparent > 0 {
		return f.Transparent
	}
	return f.Gateway
}

// natRules redirect what sandboxes send to ports 80 and 443 of any address to the gateway: on
// the sandbox bridge (Docker) to the bridge's own address, which is Host; from a Pod network to
// Host itself, which is not the address of the interface the packets come in on.
func (f *Firewall) natRules() [][]string {
	if f.Transparent <= 0 {
		return nil
	}
	to := []string{"-j", "REDIRECT", "--to-ports", strconv.Itoa(f.Transparent)}
	if f.Bridge == "" {
		to = []string{"-j", "DNAT", "--to-destination", f.Host.String() + ":" + strconv.Itoa(f.Transparent)}
	}
	var rs [][]string
	for _, port := range redirectedPorts {
		rs = append(rs, append([]string{"-p", "tcp", "--dport", port}, to...))
	}
	return rs
}

// Apply installs the rules; it is idempotent, so it also repairs them.
func (f *Firewall) Apply() error {
	if (f.Bridge == "") == !f.Source.IsValid() {
		return errors.New("firewall: exactly one of a bridge and a source network says which packets are the sandboxes'")
	}
	hooks := []string{"INPUT"}
	if f.Forward {
		hooks = append(hooks, "FORWARD")
	}
	if err := f.chain(nil, f.rules(), hooks...); err != nil {
		return err
	}
	if f.Transparent > 0 {
		return f.chain([]string{"-t", "nat"}, f.natRules(), "PREROUTING")
	}
	return f.removeChain([]string{"-t", "nat"}, "PREROUTING")
}

// matches select the sandboxes' packets, each the match of one jump.
func (f *Firewall) matches() [][]string {
	if f.Bridge == "" {
		return [][]string{{"-s", f.Source.String()}}
	}
	ms := [][]string{{"-i", f.Bridge}}
	if f.Ports != "" {
		ms = append(ms, []string{"-i", f.Ports})
	}
	return ms
}

// chain makes f.Chain in table hold rules, jumped to first from each hook for the sandboxes'
// packets.
func (f *Firewall) chain(table []string, rules [][]string, hooks ...string) error {
	ipt := func(args ...string) error { return f.iptables(append(append([]string{}, table...), args...)...) }
	if err := ipt("-N", f.Chain); err != nil && !strings.Contains(err.Error(), "exists") {
		return err
	}
	if err := ipt("-F", f.Chain); err != nil {
		return err
	}
	for _, r := range rules {
		if err := ipt(append([]string{"-A", f.Chain}, r...)...); err != nil {
			return err
		}
	}
	for _, hook := range hooks {
		// A jump to the chain with a match no longer ours (an earlier build's) goes: it would
		// send another interface's packets through these rules.
		if err := f.dropStaleJumps(table, hook); err != nil {
			return err
		}
		for _, m := range f.matches() {
			jump := append(append([]string{hook}, m...), "-j", f.Chain)
			if ipt(append([]string{"-C"}, jump...)...) != nil {
				if err := ipt(append([]string{"-I"}, jump...)...); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Remove deletes the rules; removing rules that are not there is not an error.
func (f *Firewall) Remove() error {
	return errors.Join(f.removeChain(nil, "INPUT", "FORWARD"), f.removeChain([]string{"-t", "nat"}, "PREROUTING"))
}

func (f *Firewall) removeChain(table []string, hooks ...string) error {
	ipt := func(args ...string) error { return f.iptables(append(append([]string{}, table...), args...)...) }
	for _, hook := range hooks {
		for _, m := range f.matches() {
			for ipt(append(append([]string{"-D", hook}, m...), "-j", f.Chain)...) == nil {
			}
		}
	}
	ipt("-F", f.Chain)
	if err := ipt("-X", f.Chain); err != nil && !strings.Contains(err.Error(), "No chain") &&
		!strings.Contains(err.Error(), "does not exist") {
		return err
	}
	return nil
}

// dropStaleJumps deletes the jumps from hook to f.Chain whose match is none of f.matches().
func (f *Firewall) dropStaleJumps(table []string, hook string) error {
	out, err := f.run(append(append([]string{}, table...), "-S", hook)...)
	if err != nil {
		return err
	}
	ours := map[string]bool{}
	for _, m := range f.matches() {
		ours[strings.Join(append(append([]string{"-A", hook}, m...), "-j", f.Chain), " ")] = true
	}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 4 || fields[len(fields)-2] != "-j" || fields[len(fields)-1] != f.Chain || ours[strings.Join(fields, " ")] {
			continue
		}
		fields[0] = "-D"
		if err := f.iptables(append(append([]string{}, table...), fields...)...); err != nil {
			return err
		}
	}
	return nil
}

// iptables runs iptables, in f.Netns when that is set.
func (f *Firewall) iptables(args ...string) error {
	_, err := f.run(args...)
	return err
}

// run runs iptables, in f.Netns when that is set, and returns what it printed.
func (f *Firewall) run(args ...string) (string, error) {
	argv := append([]string{"iptables", "-w", "5"}, args...)
	if f.Netns != "" {
		argv = append([]string{"nsenter", "--net=/run/netns/" + f.Netns, "--"}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
