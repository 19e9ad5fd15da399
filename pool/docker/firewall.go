package docker

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
)

// Firewall confines what sandboxes reach on the host itself: packets arriving on the sandbox
// bridge may reach only the gateway's TCP ports and the resolver's port on the bridge address;
// everything else is rejected, so a wrongly bound host service stays out of reach. TCP to ports
// 80 and 443 of any address is redirected to the gateway (see Transparent). Docker's internal
// network already keeps sandboxes off other networks and away from each other.
type Firewall struct {
	Chain   string // e.g. "AIRLOCK-node1"; at most 28 characters
	Bridge  string
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

// natRules redirect what sandboxes send to ports 80 and 443 of any address to the gateway.
func (f *Firewall) natRules() [][]string {
	if f.Transparent <= 0 {
		return nil
	}
	var rs [][]string
	for _, port := range redirectedPorts {
		rs = append(rs, []string{"-p", "tcp", "--dport", port, "-j", "REDIRECT", "--to-ports", strconv.Itoa(f.Transparent)})
	}
	return rs
}

// Apply installs the rules; it is idempotent, so it also repairs them.
func (f *Firewall) Apply() error {
	if err := f.chain(nil, f.rules(), "INPUT"); err != nil {
		return err
	}
	if f.Transparent > 0 {
		return f.chain([]string{"-t", "nat"}, f.natRules(), "PREROUTING")
	}
	return f.removeChain([]string{"-t", "nat"}, "PREROUTING")
}

// chain makes f.Chain in table hold rules, jumped to first from hook for the sandbox bridge.
func (f *Firewall) chain(table []string, rules [][]string, hook string) error {
	ipt := func(args ...string) error { return iptables(append(append([]string{}, table...), args...)...) }
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
	jump := []string{hook, "-i", f.Bridge, "-j", f.Chain}
	if ipt(append([]string{"-C"}, jump...)...) != nil {
		return ipt(append([]string{"-I"}, jump...)...)
	}
	return nil
}

// Remove deletes the rules; removing rules that are not there is not an error.
func (f *Firewall) Remove() error {
	return errors.Join(f.removeChain(nil, "INPUT"), f.removeChain([]string{"-t", "nat"}, "PREROUTING"))
}

func (f *Firewall) removeChain(table []string, hook string) error {
	ipt := func(args ...string) error { return iptables(append(append([]string{}, table...), args...)...) }
	for ipt("-D", hook, "-i", f.Bridge, "-j", f.Chain) == nil {
	}
	ipt("-F", f.Chain)
	if err := ipt("-X", f.Chain); err != nil && !strings.Contains(err.Error(), "No chain") &&
		!strings.Contains(err.Error(), "does not exist") {
		return err
	}
	return nil
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
