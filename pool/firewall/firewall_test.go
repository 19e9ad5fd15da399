package firewall

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func joined(rs [][]string) string {
	var lines []string
	for _, r := range rs {
		lines = append(lines, strings.Join(r, " "))
	}
	return strings.Join(lines, "\n")
}

// TestRulesOpenOnlyTheGatewayAndResolver: whichever way the sandboxes' packets are told apart,
// the chain accepts replies and the gateway's and resolver's ports at Host, and rejects the rest.
func TestRulesOpenOnlyTheGatewayAndResolver(t *testing.T) {
	f := &Firewall{Chain: "AIRLOCK-n1", Source: netip.MustParsePrefix("10.244.0.0/24"), Forward: true,
		Host: netip.MustParseAddr("10.0.0.1"), Gateway: 3128, DNS: 53}
	got := joined(f.rules())
	want := strings.Join([]string{
		"-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
		"-p tcp -d 10.0.0.1/32 --dport 3128 -j ACCEPT",
		"-p udp -d 10.0.0.1/32 --dport 53 -j ACCEPT",
		"-p tcp -d 10.0.0.1/32 --dport 3128 -j ACCEPT",
		"-p tcp -d 10.0.0.1/32 --dport 53 -j ACCEPT",
		"-p tcp -j REJECT --reject-with tcp-reset",
		"-j REJECT --reject-with icmp-port-unreachable",
	}, "\n")
	if got != want {
		t.Fatalf("rules:\n%s\nwant:\n%s", got, want)
	}
	matched := func(f *Firewall) string {
		var ms []string
		for _, m := range f.matches() {
			ms = append(ms, strings.Join(m, " "))
		}
		return strings.Join(ms, "; ")
	}
	if m := matched(f); m != "-s 10.244.0.0/24" {
		t.Fatalf("a Pod network is matched by %q", m)
	}
	if m := matched(&Firewall{Bridge: "airlock0"}); m != "-i airlock0" {
		t.Fatalf("a bridge is matched by %q", m)
	}
	// A port taken off its bridge is still a sandbox's: its packets jump to the chain too.
	if m := matched(&Firewall{Bridge: "airlock0", Ports: "al+"}); m != "-i airlock0; -i al+" {
		t.Fatalf("a bridge and its ports are matched by %q", m)
	}
}

// TestRedirectReachesTheGateway: on a bridge whose address is the gateway's, a redirect does;
// from a Pod network, whose packets come in on an interface whose address is not the gateway's,
// the connections are sent to the gateway's address itself.
func TestRedirectReachesTheGateway(t *testing.T) {
	host := netip.MustParseAddr("10.0.0.1")
	bridge := joined((&Firewall{Bridge: "airlock0", Host: host, Transparent: 3129}).natRules())
	if !strings.Contains(bridge, "--dport 443 -j REDIRECT --to-ports 3129") {
		t.Fatalf("bridge redirect:\n%s", bridge)
	}
	pods := joined((&Firewall{Source: netip.MustParsePrefix("10.244.0.0/24"), Host: host, Transparent: 3129}).natRules())
	if !strings.Contains(pods, "--dport 80 -j DNAT --to-destination 10.0.0.1:3129") || !strings.Contains(pods, "--dport 443 -j DNAT --to-destination 10.0.0.1:3129") {
		t.Fatalf("Pod network redirect:\n%s", pods)
	}
	if (&Firewall{Host: host}).natRules() != nil {
		t.Fatal("no transparent port, yet redirect rules")
	}
}

// TestApplyRefusesAmbiguity: a firewall that does not say which packets are the sandboxes'
// (or says it twice) is refused before any rule is made.
func TestApplyRefusesAmbiguity(t *testing.T) {
	for _, f := range []*Firewall{
		{Chain: "AIRLOCK-x", Host: netip.MustParseAddr("10.0.0.1")},
		{Chain: "AIRLOCK-x", Bridge: "b", Source: netip.MustParsePrefix("10.0.0.0/24")},
	} {
		if err := f.Apply(); err == nil || !strings.Contains(err.Error(), "exactly one") {
			t.Fatalf("%+v: %v", f, err)
		}
	}
}

// TestApplyDropsStaleJumps, with real iptables in a network namespace of the test's own: a jump
// to the chain with a match that is no longer the firewall's (an earlier build's wider "al+",
// which sent the test cluster's "alk8s0" through a Docker node's rules) goes at Apply, and
// the firewall's own jumps are there once each, Apply after Apply.
func TestApplyDropsStaleJumps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, for a network namespace and iptables")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("no iptables")
	}
	ns := fmt.Sprintf("airlock-fwtest-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
	f := &Firewall{Chain: "AIRLOCK-T", Bridge: "b0", Ports: "al0ad500+", Netns: ns,
		Host: netip.MustParseAddr("10.213.0.1"), Gateway: 3128, DNS: 53}
	for _, args := range [][]string{{"-N", "AIRLOCK-T"}, {"-A", "INPUT", "-i", "al+", "-j", "AIRLOCK-T"}, {"-A", "INPUT", "-i", "eth9", "-j", "ACCEPT"}} {
		if err := f.iptables(args...); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := f.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	out, err := f.run("-S", "INPUT")
	if err != nil {
		t.Fatal(err)
	}
	var jumps []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasSuffix(line, "-j AIRLOCK-T") {
			jumps = append(jumps, line)
		}
	}
	slices.Sort(jumps)
	if got := strings.Join(jumps, "; "); got != "-A INPUT -i al0ad500+ -j AIRLOCK-T; -A INPUT -i b0 -j AIRLOCK-T" {
		t.Errorf("jumps to the chain after Apply: %s", got)
	}
	if !strings.Contains(out, "-A INPUT -i eth9 -j ACCEPT") {
		t.Errorf("Apply removed a rule not its own:\n%s", out)
	}
	if err := f.Remove(); err != nil {
		t.Fatal(err)
	}
	if out, _ := f.run("-S", "INPUT"); strings.Contains(out, "AIRLOCK-T") {
		t.Errorf("jumps left after Remove:\n%s", out)
	}
}
