package docker

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
)

// TestHalvesSplitTheSubnet: the engine's range and the node's never overlap, and the node's
// leaves out the subnet's broadcast address, on the smallest subnet a config allows too.
func TestHalvesSplitTheSubnet(t *testing.T) {
	for _, c := range []struct{ subnet, engine, first, last string }{
		{"10.213.0.0/24", "10.213.0.0/25", "10.213.0.128", "10.213.0.254"},
		{"10.213.0.0/16", "10.213.0.0/17", "10.213.128.0", "10.213.255.254"},
		{"10.213.0.16/28", "10.213.0.16/29", "10.213.0.24", "10.213.0.30"},
	} {
		engine, first, last := halves(netip.MustParsePrefix(c.subnet))
		if engine.String() != c.engine || first.String() != c.first || last.String() != c.last {
			t.Errorf("%s: engine %s, node %s to %s; want %s, %s to %s", c.subnet, engine, first, last, c.engine, c.first, c.last)
		}
	}
	if got := portName(netip.MustParseAddr("10.213.0.130")); got != "al0ad50082" {
		t.Errorf("port name %q", got)
	}
	// The firewall's pattern for a subnet's ports: the digits its addresses share, and no
	// more, so that it matches neither another subnet's ports nor an interface that only
	// begins with the prefix (the test cluster's "alk8s0", which a pattern "al+" confined).
	for subnet, want := range map[string]string{"10.213.0.0/24": "al0ad500+", "10.213.0.0/20": "al0ad50+", "10.213.0.0/22": "al0ad50+", "10.213.0.128/25": "al0ad500+"} {
		if got := portPattern(netip.MustParsePrefix(subnet)); got != want {
			t.Errorf("port pattern of %s: %q, want %q", subnet, got, want)
		}
	}
}

// loadedRuntime is a Runtime whose address book is loaded with held (address -> container),
// so that take never asks the engine.
func loadedRuntime(subnet string, held map[string]string) *Runtime {
	r := &Runtime{cfg: Config{Subnet: netip.MustParsePrefix(subnet)}}
	_, first, _ := halves(r.cfg.Subnet)
	r.addrs = addrs{loaded: true, held: map[netip.Addr]string{}, of: map[string]netip.Addr{}, next: first}
	for a, id := range held {
		r.addrs.held[netip.MustParseAddr(a)], r.addrs.of[id] = id, netip.MustParseAddr(a)
	}
	return r
}

// TestTakeMovesOnAndSkipsHeld: addresses go out in order past those held, one given back comes
// round again only after every other, and a full half is refused saying so.
func TestTakeMovesOnAndSkipsHeld(t *testing.T) {
	r := loadedRuntime("10.1.0.16/28", map[string]string{"10.1.0.25": "adopted"})
	take := func() string {
		t.Helper()
		a, err := r.take(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return a.String()
	}
	if a, b := take(), take(); a != "10.1.0.24" || b != "10.1.0.26" {
		t.Fatalf("took %s and %s, want 10.1.0.24 and 10.1.0.26 (10.1.0.25 is held)", a, b)
	}
	r.give(netip.MustParseAddr("10.1.0.24"))
	var got []string
	for range 4 {
		got = append(got, take())
	}
	if strings.Join(got, " ") != "10.1.0.27 10.1.0.28 10.1.0.29 10.1.0.30" {
		t.Fatalf("took %v after giving 10.1.0.24 back, want the rest of the half first", got)
	}
	if a := take(); a != "10.1.0.24" {
		t.Fatalf("took %s, want the address given back, the only one free", a)
	}
	if _, err := r.take(context.Background()); err == nil || !strings.Contains(err.Error(), "every address of 10.1.0.16/28's upper half (10.1.0.24 to 10.1.0.30) is held") {
		t.Fatalf("a full half: %v", err)
	}
	// A bound address is given back by its container's release, not by give.
	r.bind(netip.MustParseAddr("10.1.0.26"), "c1")
	r.give(netip.MustParseAddr("10.1.0.26"))
	if _, err := r.take(context.Background()); err == nil {
		t.Fatal("give handed back an address its container holds")
	}
	r.release("adopted")
	if a := take(); a != "10.1.0.25" {
		t.Fatalf("took %s, want the adopted sandbox's address once it is released", a)
	}
}

// TestWiredSandbox makes runc sandboxes the node wires, on the real engine: each at an address
// of the node's half, on an isolated port of the bridge named after it, reaching the host's
// address and not another sandbox, without IPv6; a node made anew hands out none of the
// addresses its sandboxes hold; an address another's port holds is refused, leaving nothing
// behind; and the node refuses to wire its own namespace.
func TestWiredSandbox(t *testing.T) {
	r := testRuntime(t)
	tmpl := testTemplate("runc")
	a, b := newSandbox(t, r, tmpl), newSandbox(t, r, tmpl)
	_, first, last := halves(testSubnet)
	for _, sb := range []pool.Sandbox{a, b} {
		if sb.Addr.Compare(first) < 0 || sb.Addr.Compare(last) > 0 {
			t.Fatalf("sandbox %s at %s, outside the node's half %s-%s", short(sb.ID), sb.Addr, first, last)
		}
		port, err := netlink.LinkByName(portName(sb.Addr))
		if err != nil {
			t.Fatalf("no bridge port for %s: %v", sb.Addr, err)
		}
		br, err := netlink.LinkByName(testBridge)
		if err != nil {
			t.Fatal(err)
		}
		if port.Attrs().MasterIndex != br.Attrs().Index {
			t.Errorf("port %s is not the bridge %s's", port.Attrs().Name, testBridge)
		}
		if pi, err := netlink.LinkGetProtinfo(port); err != nil || !pi.Isolated {
			t.Errorf("port %s is not isolated: %+v %v", port.Attrs().Name, pi, err)
		}
		ins, err := r.cli.ContainerInspect(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !ins.Config.NetworkDisabled || ins.HostConfig.NetworkMode != "none" || ins.Config.Labels[LabelAddr] != sb.Addr.String() {
			t.Errorf("container: network disabled %v, mode %q, address label %q", ins.Config.NetworkDisabled, ins.HostConfig.NetworkMode, ins.Config.Labels[LabelAddr])
		}
		out := runIn(t, r, sb, "sh", "-c", "ip -4 -o addr show dev eth0; ip route; cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6; ip -6 addr")
		if !strings.Contains(out, "inet "+sb.Addr.String()+"/24") || !strings.Contains(out, "default via "+r.gw.String()+" dev eth0") {
			t.Errorf("sandbox %s's network:\n%s", sb.Addr, out)
		}
		if strings.Contains(out, "inet6") || !strings.Contains(out, "\n1\n") {
			t.Errorf("sandbox %s has IPv6:\n%s", sb.Addr, out)
		}
	}
	if a.Addr == b.Addr {
		t.Fatalf("two sandboxes at %s", a.Addr)
	}
	// The host's address answers (its listener on the bridge), another sandbox's does not.
	probe := func(sb pool.Sandbox, addr string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var out strings.Builder
		r.Exec(ctx, sb, pool.ExecRequest{Cmd: []string{"sh", "-c", "timeout 3 bash -c 'exec 3<>/dev/tcp/" + addr + "/8080' && echo connected || echo refused"}}, nil, &out, &out)
		return out.String()
	}
	runIn(t, r, b, "sh", "-c", "nohup python3 -m http.server 8080 --bind 0.0.0.0 >/dev/null 2>&1 &")
	wait.For(t, 20*time.Second, "sandbox B's server to answer B itself (control)", func() bool {
		return strings.Contains(probe(b, "127.0.0.1"), "connected")
	})
	if out := probe(b, b.Addr.String()); !strings.Contains(out, "connected") {
		t.Fatalf("control: sandbox B's server does not answer at B's own address: %s", out)
	}
	if out := probe(a, b.Addr.String()); strings.Contains(out, "connected") {
		t.Errorf("sandbox A reached sandbox B at %s:8080", b.Addr)
	}

	// A node made anew (an adopting restart) loads what its sandboxes hold.
	// and starts after the highest of them, so an address an earlier run gave back just before it
	// ended is not the first out again.
	fresh := &Runtime{cli: r.cli, gw: r.gw, cfg: r.cfg}
	highest := a.Addr
	if b.Addr.Compare(highest) > 0 {
		highest = b.Addr
	}
	for i := range 4 {
		addr, err := fresh.take(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if addr == a.Addr || addr == b.Addr {
			t.Fatalf("a node made anew handed out %s, which a live sandbox holds", addr)
		}
		if i == 0 && addr.Compare(highest) <= 0 {
			t.Errorf("a node made anew handed out %s first, not an address after the highest held (%s)", addr, highest)
		}
	}

	// A runtime that believes a's address free cannot wire it: a's port holds it.
	blind := &Runtime{cli: r.cli, gw: r.gw, cfg: r.cfg, addrs: addrs{loaded: true, held: map[netip.Addr]string{}, of: map[string]netip.Addr{}, next: a.Addr}}
	before, _ := r.containers(context.Background())
	if sb, err := blind.Create(context.Background(), tmpl); !errors.Is(err, errPortTaken) {
		if err == nil {
			blind.Destroy(context.Background(), sb.ID)
		}
		t.Fatalf("wiring a held address: %v", err)
	}
	if after, _ := r.containers(context.Background()); len(after) != len(before) {
		t.Errorf("the refused sandbox was left behind: %d containers before, %d after", len(before), len(after))
	}
	if out := runIn(t, r, a, "ip", "-4", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, a.Addr.String()) {
		t.Errorf("sandbox A lost its address to the refused wiring: %s", out)
	}
	// It keeps the refused address out of its way and goes on past every held one (b's is
	// next), each refused the same way, to a free one.
	for i := 0; ; i++ {
		sb, err := blind.Create(context.Background(), tmpl)
		if err == nil {
			blind.Destroy(context.Background(), sb.ID)
			if sb.Addr == a.Addr || sb.Addr == b.Addr {
				t.Fatalf("a second sandbox wired at %s", sb.Addr)
			}
			break
		}
		if !errors.Is(err, errPortTaken) || i == 2 {
			t.Fatalf("after a refusal, creation %d: %v", i+1, err)
		}
	}

	// The node's own namespace is never wired.
	addr := netip.MustParseAddr("10.230.0.250")
	if err := wire("", os.Getpid(), addr, r.gw, testSubnet, testBridge); err == nil || !strings.Contains(err.Error(), "no network namespace of its own") {
		t.Errorf("wiring the node's own namespace: %v", err)
	}
	// Nor a process that is not the sandbox's: this test's, for sandbox B.
	if err := wire(b.ID, os.Getpid(), addr, r.gw, testSubnet, testBridge); err == nil || !strings.Contains(err.Error(), "is not the sandbox's") {
		t.Errorf("wiring another process's namespace for a sandbox: %v", err)
	}
	if _, err := netlink.LinkByName(portName(addr)); err == nil {
		t.Errorf("a port %s was made for the node's own namespace", portName(addr))
	}

	// The network is not replaced under the sandboxes the node wired into its bridge (the
	// engine, which knows nothing of them, would remove it).
	changed := &Runtime{cli: r.cli, gw: r.gw, cfg: r.cfg}
	changed.cfg.Bridge = "airlock-ckpt2"
	if err := changed.EnsureNetwork(context.Background()); err == nil || !strings.Contains(err.Error(), "sandboxes the node wired into its bridge are on it") {
		t.Errorf("replacing the network under wired sandboxes: %v", err)
	}
	if out := runIn(t, r, a, "ip", "-4", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, a.Addr.String()) {
		t.Errorf("sandbox A lost its address to the refused replacement: %s", out)
	}
	if _, err := netlink.LinkByName(testBridge); err != nil {
		t.Errorf("the bridge is gone after a refused replacement: %v", err)
	}

	// A destroyed sandbox's port goes with it.
	if err := r.Destroy(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	// The kernel removes a namespace's interfaces after the namespace's last user is gone.
	wait.For(t, 10*time.Second, "the port of destroyed sandbox "+a.Addr.String()+" to go", func() bool {
		_, err := netlink.LinkByName(portName(a.Addr))
		return err != nil
	})

	// The engine does not know sandbox B is on the network: the node refuses to remove it, and
	// when it was removed behind the node's back (a prune), to make it anew under B's port.
	if err := r.RemoveNetwork(context.Background()); err == nil || !strings.Contains(err.Error(), "destroy them before it is removed") {
		t.Errorf("removing the network under a wired sandbox: %v", err)
	}
	if err := r.cli.NetworkRemove(context.Background(), r.cfg.Network); err != nil {
		t.Fatalf("the engine refused to remove the network it thinks empty (the premise of the refusals): %v", err)
	}
	if err := r.EnsureNetwork(context.Background()); err == nil || !strings.Contains(err.Error(), "network "+r.cfg.Network+" is gone") {
		t.Errorf("making the network anew under a wired sandbox's port: %v", err)
	}
	if err := r.Destroy(context.Background(), b.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.EnsureNetwork(context.Background()); err != nil {
		t.Errorf("making the network anew once no wired sandbox is left: %v", err)
	}
}

// TestDropNSNamesOnlyContainers: an id that is not an engine's container id (one read back from
// Redis, say) names no namespace: dropNS never joins it into a path, so "../" in it reaches
// nothing outside /run/netns.
func TestDropNSNamesOnlyContainers(t *testing.T) {
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := dropNS("x/../../.." + victim); err != nil {
		t.Errorf("dropNS of an id that is no container's: %v", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("dropNS of an id with ../ in it removed %s: %v", victim, err)
	}
}

// TestKeepAddressOnlyInTheEngineHalf: a restore asks the engine for the sandbox's address only
// in the engine's half of the subnet; one in the node's half may be a wired sandbox's, which the
// engine would hand out a second time. (The runtime has no engine: asking it would panic.)
func TestKeepAddressOnlyInTheEngineHalf(t *testing.T) {
	r := loadedRuntime("10.1.0.0/24", nil)
	for _, a := range []string{"10.1.0.128", "10.1.0.200", "10.1.0.254", "10.2.0.5"} {
		if r.keepAddress(context.Background(), "c1", netip.MustParseAddr(a)) {
			t.Errorf("a restore kept %s, outside the engine's half", a)
		}
	}
}

// TestWiredGVisorSandbox makes a gVisor sandbox the node wires before its start, on the real
// engine through airlock's runsc wrapper: it boots in the namespace made for it, at an address
// of the node's half, on an isolated port, with its route through the host and no IPv6; a
// sandbox started outside the namespace wired for it is caught; the namespace goes with the
// sandbox, and one a node left behind is swept.
func TestWiredGVisorSandbox(t *testing.T) {
	r := testRuntime(t)
	have, err := r.EngineRuntimes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := have["runsc"]; !ok {
		t.Skip("the engine has no runsc (`make runsc` registers it)")
	}
	if !r.wrapped["runsc"] {
		t.Fatal("the engine's runsc is not airlock's wrapper: it was registered by something other than scripts/runsc.sh")
	}
	tmpl := testTemplate("runsc")
	if !r.wires(tmpl) {
		t.Fatal("a gVisor template is not wired by the node under the wrapper")
	}
	keeps := tmpl
	keeps.Snapshot.Memory = true
	if r.wires(keeps) {
		t.Error("a gVisor template that keeps memory is wired by the node; its restores need the engine's endpoint")
	}
	sb := newSandbox(t, r, tmpl)
	_, first, last := halves(testSubnet)
	if sb.Addr.Compare(first) < 0 || sb.Addr.Compare(last) > 0 {
		t.Fatalf("sandbox at %s, outside the node's half %s-%s", sb.Addr, first, last)
	}
	if _, err := os.Stat("/run/netns/" + nsName(sb.ID)); err != nil {
		t.Fatalf("no namespace made for the sandbox: %v", err)
	}
	port, err := netlink.LinkByName(portName(sb.Addr))
	if err != nil {
		t.Fatalf("no bridge port for %s: %v", sb.Addr, err)
	}
	if pi, err := netlink.LinkGetProtinfo(port); err != nil || !pi.Isolated {
		t.Errorf("port %s is not isolated: %+v %v", port.Attrs().Name, pi, err)
	}
	out := runIn(t, r, sb, "sh", "-c", "ip -4 addr; ip route; ip -6 addr")
	if !strings.Contains(out, sb.Addr.String()+"/24") || !strings.Contains(out, "default via "+r.gw.String()) || strings.Contains(out, "inet6") {
		t.Errorf("the gVisor sandbox's network:\n%s", out)
	}

	// A namespace wired as the node wires one, that no sandbox booted in, is caught.
	fake := strings.Repeat("e", 64)
	addr := netip.MustParseAddr("10.230.0.251")
	ns, err := makeNS(nsName(fake))
	if err != nil {
		t.Fatal(err)
	}
	defer dropNS(fake)
	err = plug(ns, addr, r.gw, testSubnet, testBridge)
	ns.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := booted(fake, addr); err == nil || !strings.Contains(err.Error(), "did not boot the sandbox in the namespace the node wired") {
		t.Errorf("a namespace no sandbox booted in: %v", err)
	}
	// Left behind by a node that ended: swept at the next start, its port with it.
	if err := r.EnsureNetwork(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + nsName(fake)); err == nil {
		t.Error("a namespace whose sandbox is gone was not swept")
	}
	if _, err := os.Stat("/run/netns/" + nsName(sb.ID)); err != nil {
		t.Errorf("the sweep took a live sandbox's namespace: %v", err)
	}
	wait.For(t, 10*time.Second, "the swept namespace's port "+portName(addr)+" to go", func() bool {
		_, err := netlink.LinkByName(portName(addr))
		return err != nil
	})

	if err := r.Destroy(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + nsName(sb.ID)); err == nil {
		t.Error("the destroyed sandbox's namespace is still there")
	}
	wait.For(t, 10*time.Second, "the destroyed sandbox's port "+portName(sb.Addr)+" to go", func() bool {
		_, err := netlink.LinkByName(portName(sb.Addr))
		return err != nil
	})
}
