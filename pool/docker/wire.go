package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/pool"
)

// A runc or crun sandbox is made with its network disabled (an empty network namespace of its
// own) and wired into the sandbox bridge by the node, after its start: a veth pair, one end
// the sandbox's eth0 with an address of the node's choosing and a default route through the
// host, the other a port of the bridge. The engine's network hook is most of a sandbox's making
// otherwise (it re-executes the engine three times and runs eleven iptables commands per
// start; docs/bench-pool.md), and the sandbox reaches exactly what it reached on the engine's
// network: the bridge, its host address, and through the firewall nothing else.
//
// gVisor's runsc reads its namespace's interfaces once, as it boots, so an interface wired after
// the start would never be its: a gVisor sandbox is wired before its start instead, into a
// named namespace the node makes for it (/run/netns/airlock-<id>), which the engine's runsc,
// when it is airlock's wrapper (tools/runsc/wrap, registered by scripts/runsc.sh), boots the
// sandbox in. Where the engine's runsc is not the wrapper, and for templates whose pauses keep
// memory (their checkpoints are restored with the engine's endpoint), gVisor's sandboxes stay
// on the engine's network.
//
// The subnet is split in two: its lower half is the engine's (the network's IP range, from
// which gVisor's sandboxes are given addresses, a restore's fallback included), its upper half
// the node's, so neither can hand out an address the other holds. Within the node's half, an
// address is held by the bridge port named after it (portName), which the kernel lets exist
// once: two nodes, or two runtimes, that pick the same address cannot both wire it.

// LabelAddr is the address of a sandbox the node wired (the label's presence says it was).
const LabelAddr = "dev.airlock.addr"

// errPortTaken means another sandbox's bridge port holds the address.
var errPortTaken = errors.New("another sandbox holds the address")

// wrapper is the base name of airlock's runsc wrapper (tools/runsc/wrap).
const wrapper = "airlock-runsc"

// wires reports whether sandboxes of t are wired by the node (see above).
func (r *Runtime) wires(t pool.Template) bool {
	switch rt, _ := t.RuntimePlatform(); {
	case rt == "runc" || rt == "crun":
		return true
	case rt == "runsc":
		return !t.Snapshot.Memory && r.wrapped[t.EngineRuntime()]
	}
	return false
}

// prewired reports whether sandboxes of t are wired before their start (gVisor's).
func prewired(t pool.Template) bool {
	rt, _ := t.RuntimePlatform()
	return rt == "runsc"
}

// nsName is the name of the namespace the node makes for gVisor sandbox id.
func nsName(id string) string { return "airlock-" + id }

// readEngine records which of the engine's runtimes are airlock's runsc wrapper.
func (r *Runtime) readEngine(ctx context.Context) error {
	info, err := r.cli.Info(ctx)
	if err != nil {
		return fmt.Errorf("docker: info: %w", err)
	}
	r.wrapped = map[string]bool{}
	probed, canMake := false, false
	for name, rt := range info.Runtimes {
		if filepath.Base(rt.Path) != wrapper {
			continue
		}
		// A node that cannot make a named namespace the engine's runtime sees (one in a
		// container without /run/netns shared with the host, or not allowed to mount) leaves
		// gVisor's sandboxes on the engine's network rather than fail to make every one.
		if !probed {
			probed, canMake = true, canMakeNS()
		}
		r.wrapped[name] = canMake
	}
	return nil
}

// canMakeNS reports whether the node can make (and remove) a named network namespace that the
// host's first process, and so the engine beside it, sees too.
func canMakeNS() bool {
	name := fmt.Sprintf("airlock-probe-%d", os.Getpid())
	ns, err := makeNS(name)
	if err != nil {
		return false
	}
	ns.Close()
	return errors.Join(seenByHost(name), netns.DeleteNamed(name)) == nil
}

// seenByHost checks that the host's first process sees the named namespace name, when the node
// is not in its mount namespace (a node in a container with the host's process namespace).
// A first process the node may not look at (a microVM's init) is taken for the host's own
// mount namespace; were it not, booted still catches a sandbox started outside its namespace.
func seenByHost(name string) error {
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	host, err := os.Readlink("/proc/1/ns/mnt")
	if errors.Is(err, fs.ErrPermission) || (err == nil && host == own) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = os.Stat(filepath.Join("/proc/1/root", netnsDir, name))
	return err
}

// makeNS makes the named network namespace name, with IPv6 off in it, on a thread of its own
// that goes back to the node's namespace after, or ends.
func makeNS(name string) (netns.NsHandle, error) {
	type made struct {
		ns  netns.NsHandle
		err error
	}
	done := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		node, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- made{netns.None(), err}
			return
		}
		defer node.Close()
		ns, err := netns.NewNamed(name)
		if err == nil {
			// /proc/sys/net is the namespace of the thread that opens it: this one's now.
			for _, f := range []string{"all", "default"} {
				if err == nil {
					err = os.WriteFile("/proc/sys/net/ipv6/conf/"+f+"/disable_ipv6", []byte("1"), 0)
				}
			}
		}
		// A thread that cannot go back stays locked, and ends with this goroutine.
		if serr := netns.Set(node); serr != nil {
			err = errors.Join(err, fmt.Errorf("back to the node's namespace: %w", serr))
		} else {
			runtime.UnlockOSThread()
		}
		if err != nil {
			if ns.IsOpen() {
				ns.Close()
			}
			netns.DeleteNamed(name)
			done <- made{netns.None(), fmt.Errorf("network namespace %s: %w", name, err)}
			return
		}
		done <- made{ns, nil}
	}()
	m := <-done
	return m.ns, m.err
}

// booted checks that gVisor sandbox id booted in the namespace the node wired for it: runsc
// takes the address of each interface it finds off the host's side as it boots, so an address
// still there means the sandbox was started elsewhere (an engine whose runsc is not the wrapper
// any more) and reaches nothing.
func booted(id string, addr netip.Addr) error {
	ns, err := netns.GetFromName(nsName(id))
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", nsName(id), err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in network namespace %s: %w", nsName(id), err)
	}
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("eth0 of network namespace %s: %w", nsName(id), err)
	}
	as, err := h.AddrList(eth, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("eth0 of network namespace %s: %w", nsName(id), err)
	}
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
			return fmt.Errorf("the engine's runsc did not boot the sandbox in the namespace the node wired (it is not %s, or not as registered by scripts/runsc.sh)", wrapper)
		}
	}
	return nil
}

// dropNS removes the namespace made for gVisor sandbox id, if there is one. Only an engine's
// container id names one: any other id (one read back from Redis, say) names no namespace and
// is never joined into a path.
func dropNS(id string) error {
	if !containerID.MatchString(id) {
		return nil
	}
	err := netns.DeleteNamed(nsName(id))
	if errors.Is(err, syscall.EINVAL) {
		// Not a mount: the file of a namespace whose mount failed as it was made.
		err = os.Remove(filepath.Join(netnsDir, nsName(id)))
	}
	if err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("network namespace %s: %w", nsName(id), err)
	}
	return nil
}

// containerID is an engine's container id.
var containerID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// netnsDir is where named network namespaces are (netns.NewNamed's).
const netnsDir = "/run/netns"

// sweepNS removes the namespaces made for gVisor sandboxes that are gone (a node that ended
// between a sandbox's removal and its namespace's).
func (r *Runtime) sweepNS(ctx context.Context) error {
	names, err := filepath.Glob(filepath.Join(netnsDir, "airlock-*"))
	if err != nil || len(names) == 0 {
		return err
	}
	cs, err := r.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	live := map[string]bool{}
	for _, c := range cs {
		live[c.ID] = true
	}
	var errs []error
	for _, n := range names {
		if id := strings.TrimPrefix(filepath.Base(n), "airlock-"); !live[id] {
			errs = append(errs, dropNS(id))
		}
	}
	return errors.Join(errs...)
}

// halves splits subnet into the engine's range (its lower half) and the first and last
// addresses the node gives out (its upper half, without the broadcast address).
func halves(subnet netip.Prefix) (engine netip.Prefix, first, last netip.Addr) {
	engine = netip.PrefixFrom(subnet.Addr(), subnet.Bits()+1)
	first = lastOf(engine).Next()
	return engine, first, lastOf(subnet).Prev()
}

// lastOf is p's last address.
func lastOf(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		a[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(a)
}

// portName is the bridge port of the sandbox at addr: "al" and the address in hex, 10
// characters, within an interface name's 15.
func portName(addr netip.Addr) string {
	a := addr.As4()
	return fmt.Sprintf("%s%02x%02x%02x%02x", portPrefix, a[0], a[1], a[2], a[3])
}

// portPrefix begins the name of every host end the node wires.
const portPrefix = "al"

// portPattern is the iptables interface pattern of every host end the node wires in subnet:
// the prefix and the hex digits that every address of the subnet shares, so that the firewall
// confines what arrives on any of them (on the bridge or taken off it), and no other
// interface's (another subnet's ports, or a name such as "alk8s0" that only begins the same).
func portPattern(subnet netip.Prefix) string {
	a := subnet.Masked().Addr().As4()
	return portPrefix + fmt.Sprintf("%02x%02x%02x%02x", a[0], a[1], a[2], a[3])[:subnet.Bits()/4] + "+"
}

// addrs is the node's half of the subnet: which addresses its sandboxes hold. An address given
// back is handed out again only after every other free one (the cursor moves on), so one that
// a destroyed sandbox held is not at once another's while its lease's binding may linger.
type addrs struct {
	mu     sync.Mutex
	loaded bool
	held   map[netip.Addr]string // address -> container id ("" while its container is made)
	of     map[string]netip.Addr // container id -> address
	next   netip.Addr
}

// take holds the next free address after the cursor, loading what this node's containers hold
// (their labels) the first time, so that a node that adopts its sandboxes hands none out twice.
func (r *Runtime) take(ctx context.Context) (netip.Addr, error) {
	a := &r.addrs
	a.mu.Lock()
	defer a.mu.Unlock()
	_, first, last := halves(r.cfg.Subnet)
	if !a.loaded {
		cs, err := r.containers(ctx)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("docker: the addresses this node's sandboxes hold: %w", err)
		}
		a.held, a.of, a.next = map[netip.Addr]string{}, map[string]netip.Addr{}, first
		for _, c := range cs {
			if addr, ok := wiredAddr(c.Labels); ok {
				a.held[addr], a.of[c.ID] = c.ID, addr
				// The cursor starts after the highest address held: one an earlier run of
				// the node gave back just before it ended is not the first handed out again.
				if addr.Compare(a.next) >= 0 {
					a.next = addr.Next()
				}
			}
		}
		a.loaded = true
	}
	at := a.next
	for range int(portIndex(last, first)) + 1 {
		if at.Compare(first) < 0 || at.Compare(last) > 0 {
			at = first
		}
		if _, ok := a.held[at]; !ok {
			a.held[at] = ""
			a.next = at.Next()
			return at, nil
		}
		at = at.Next()
	}
	return netip.Addr{}, fmt.Errorf("docker: every address of %s's upper half (%s to %s) is held by a sandbox: the subnet is too small for this many sandboxes",
		r.cfg.Subnet, first, last)
}

// wiredAddr is the address of a sandbox the node wired, from its labels.
func wiredAddr(labels map[string]string) (netip.Addr, bool) {
	addr, err := netip.ParseAddr(labels[LabelAddr])
	return addr, err == nil && addr.Is4()
}

// portIndex is how far b lies after a.
func portIndex(b, a netip.Addr) uint32 {
	x, y := b.As4(), a.As4()
	return (uint32(x[0])<<24 | uint32(x[1])<<16 | uint32(x[2])<<8 | uint32(x[3])) -
		(uint32(y[0])<<24 | uint32(y[1])<<16 | uint32(y[2])<<8 | uint32(y[3]))
}

// bind records that container id holds addr.
func (r *Runtime) bind(addr netip.Addr, id string) {
	r.addrs.mu.Lock()
	defer r.addrs.mu.Unlock()
	if r.addrs.loaded {
		r.addrs.held[addr], r.addrs.of[id] = id, addr
	}
}

// give hands addr back, unless keep: an address another's port held is kept out of the way
// until the node loads its addresses anew.
func (r *Runtime) give(addr netip.Addr) {
	r.addrs.mu.Lock()
	defer r.addrs.mu.Unlock()
	if r.addrs.loaded && r.addrs.held[addr] == "" {
		delete(r.addrs.held, addr)
	}
}

// release hands back the address of container id, once it is removed.
func (r *Runtime) release(id string) {
	r.addrs.mu.Lock()
	defer r.addrs.mu.Unlock()
	if addr, ok := r.addrs.of[id]; ok {
		delete(r.addrs.of, id)
		if r.addrs.held[addr] == id {
			delete(r.addrs.held, addr)
		}
	}
}

// wire makes the sandbox id, whose main process is pid, a port of the bridge at addr: a veth pair
// whose sandbox end is created in pid's network namespace as eth0, addressed, up, with its
// default route through the host (gw); the host end is the bridge port portName(addr),
// isolated, so that no other port of the bridge reaches it whatever the host's firewall
// settings (the engine's rules for the network keep sandboxes apart too, through
// br_netfilter). It refuses pid's namespace when it is the node's own, and a pid that is not
// id's (a node outside the host's PID namespace sees other processes by those numbers).
func wire(id string, pid int, addr, gw netip.Addr, subnet netip.Prefix, bridge string) error {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("the sandbox's network namespace (the node needs the host's PID namespace, CAP_SYS_ADMIN and CAP_SYS_PTRACE): %w", err)
	}
	defer ns.Close()
	// Read after the namespace is open: the process it was opened through is id's if it is
	// still in id's cgroup.
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err != nil || !strings.Contains(string(cg), id) {
		return fmt.Errorf("process %d is not the sandbox's (the node must run in the host's PID namespace)", pid)
	}
	self, err := netns.Get()
	if err != nil {
		return fmt.Errorf("the node's network namespace: %w", err)
	}
	same := ns.Equal(self)
	self.Close()
	if same {
		return errors.New("the sandbox has no network namespace of its own: refusing to wire the node's")
	}
	return plug(ns, addr, gw, subnet, bridge)
}

// plug makes the namespace ns a port of the bridge at addr (wire).
func plug(ns netns.NsHandle, addr, gw netip.Addr, subnet netip.Prefix, bridge string) error {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", bridge, err)
	}
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU, la.MasterIndex = portName(addr), br.Attrs().MTU, br.Attrs().Index
	veth := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		if errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("bridge port %s: %w", la.Name, errPortTaken)
		}
		return fmt.Errorf("veth %s: %w", la.Name, err)
	}
	if err := wireEnds(ns, la.Name, addr, gw, subnet); err != nil {
		if port, lerr := netlink.LinkByName(la.Name); lerr == nil {
			netlink.LinkDel(port)
		}
		return err
	}
	return nil
}

// wireEnds isolates and raises the host end, and addresses, raises and routes the sandbox's.
func wireEnds(ns netns.NsHandle, port string, addr, gw netip.Addr, subnet netip.Prefix) error {
	host, err := netlink.LinkByName(port)
	if err != nil {
		return fmt.Errorf("veth %s: %w", port, err)
	}
	if err := netlink.LinkSetIsolated(host, true); err != nil {
		return fmt.Errorf("isolating bridge port %s: %w", port, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("veth %s up: %w", port, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in the sandbox's namespace: %w", err)
	}
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("the sandbox's eth0: %w", err)
	}
	ipnet := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(subnet.Bits(), 32)}
	if err := h.AddrAdd(eth, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("the sandbox's address %s: %w", addr, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("the sandbox's eth0 up: %w", err)
	}
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("the sandbox's loopback up: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("the sandbox's route through %s: %w", gw, err)
	}
	return nil
}
