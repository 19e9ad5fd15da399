package docker

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
)

// Firewall confines what sandboxes reach on the host itself: packets arriving on the sandbox
// bridge may reach only the gateway's TCP port and the resolver's port on the bridge address;
// everything else is rejected, so a wrongly bound host service stays out of reach. Docker's
// internal network already keeps sandboxes off other networks and away from each other.
type Firewall struct {
	Chain   string // e.g. "AIRLOCK-node1"; at most 28 characters
	Bridge  string
	Host    netip.Addr
	Gateway int // gateway TCP port
	DNS     int // resolver port, UDP and TCP
}

func (f *Firewall) rules() [][]string {
	h := f.Host.String() + "/32"
	return [][]string{
		// Replies to connections the host opened (an exposed port under review). Conntrack
		// decides: a sandbox cannot open a new connection through this rule.
		{"-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
		{"-p", "tcp", "-d", h, "--dport", strconv.Itoa(f.Gateway), "-j", "ACCEPT"},
		{"-p", "udp", "-d", h, "--dport", strconv.Itoa(f.DNS), "-j", "ACCEPT"},
		{"-p", "tcp", "-d", h, "--dport", strconv.Itoa(f.DNS), "-j", "ACCEPT"},
		{"-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"-j", "REJECT", "--reject-with", "icmp-port-unreachable"},
	}
}

// Apply installs the rules; it is idempotent, so it also repairs them.
func (f *Firewall) Apply() error {
	if err := iptables("-N", f.Chain); err != nil && !strings.Contains(err.Error(), "exists") {
		return err
	}
	if err := iptables("-F", f.Chain); err != nil {
		return err
	}
	for _, r := range f.rules() {
		if err := iptables(append([]string{"-A", f.Chain}, r...)...); err != nil {
			return err
		}
	}
	jump := []string{"INPUT", "-i", f.Bridge, "-j", f.Chain}
	if iptables(append([]string{"-C"}, jump...)...) != nil {
		return iptables(append([]string{"-I"}, jump...)...)
	}
	return nil
}

// Remove deletes the rules; removing rules that are not there is not an error.
func (f *Firewall) Remove() error {
	for iptables("-D", "INPUT", "-i", f.Bridge, "-j", f.Chain) == nil {
	}
	iptables("-F", f.Chain)
	if err := iptables("-X", f.Chain); err != nil && !strings.Contains(err.Error(), "No chain") &&
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
