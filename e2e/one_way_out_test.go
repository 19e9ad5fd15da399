package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// tcpProbe tries a TCP connection from the sandbox of lease to host:port and returns what it
// printed and its exit code.
func (n *nodeProc) tcpProbe(t *testing.T, lease, host string, port int) (string, int) {
	t.Helper()
	out, errs, code := n.exec(t, lease, "timeout", "5", "bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+strconv.Itoa(port)+" && echo connected")
	return out + errs, code
}

// TestOneWayOut attacks invariant 2: a sandbox reaches only the gateway and the resolver, not
// the host's other ports, not what lies past the host, not other sandboxes, not the Docker
// socket.
func TestOneWayOut(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		hostIP := n.spec.hostIP()

		t.Run("the host's other ports on the bridge are out of reach", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			// Listeners on the host's bridge address that a sandbox could reach if the rules were
			// wrong: one bound to that address, one to every address.
			specific, err := net.Listen("tcp", hostIP+":0")
			if err != nil {
				t.Fatal(err)
			}
			defer specific.Close()
			wildcard, err := net.Listen("tcp", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			defer wildcard.Close()
			accepted := recordAccepts(specific, wildcard)
			// Control: the gateway port on the same address is reachable, so the probe works.
			if out, code := n.tcpProbe(t, a.ID, hostIP, 3128); code != 0 || !strings.Contains(out, "connected") {
				t.Fatalf("control probe to the gateway failed (exit %d): %s", code, out)
			}
			for _, port := range []int{specific.Addr().(*net.TCPAddr).Port, wildcard.Addr().(*net.TCPAddr).Port} {
				if out, code := n.tcpProbe(t, a.ID, hostIP, port); code == 0 || strings.Contains(out, "connected") {
					t.Errorf("sandbox reached host port %d on the bridge address: %s", port, out)
				}
			}
			for _, from := range arrivedBefore(t, accepted, "tcp", specific.Addr().String(), net.JoinHostPort("127.0.0.1", strconv.Itoa(wildcard.Addr().(*net.TCPAddr).Port))) {
				t.Errorf("host listener accepted a connection from %s", from)
			}
		})

		t.Run("nothing past the host", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			// A server on another Docker network of the test's own, which the host itself reaches.
			outside := startOutsideServer(t)
			if out, code := n.tcpProbe(t, a.ID, outside, 8080); code == 0 || strings.Contains(out, "connected") {
				t.Errorf("sandbox reached %s:8080 on another network through the host: %s", outside, out)
			}
		})

		t.Run("DNS goes to the resolver and nowhere else", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			// The resolver the sandbox is told of is the node's, and the sandbox cannot change that.
			if out, _, _ := n.exec(t, a.ID, "grep", "^nameserver", "/etc/resolv.conf"); strings.TrimSpace(out) != "nameserver "+hostIP {
				t.Errorf("resolv.conf names %q, want only the node's resolver at %s", out, hostIP)
			}
			if _, _, code := n.exec(t, a.ID, "sh", "-c", "echo nameserver 10.215.0.10 > /etc/resolv.conf"); code == 0 {
				t.Error("the sandbox rewrote /etc/resolv.conf")
			}
			// Control: the resolver answers a query sent to it by address.
			if out, _, _ := n.exec(t, a.ID, "dig", "+short", "+tries=1", "+time=3", "@"+hostIP, "api.example.test"); strings.TrimSpace(out) == "" {
				t.Fatal("control: the node's resolver gave no answer for an allowed name")
			}
			// Another DNS server on the host's bridge address, and one past the host: queries
			// to either never arrive.
			host, err := net.ListenPacket("udp", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			defer host.Close()
			got := make(chan string, 8)
			go func() {
				buf := make([]byte, 1500)
				for {
					_, from, err := host.ReadFrom(buf)
					if err != nil {
						return
					}
					got <- from.String()
				}
			}()
			outside := startOutsideServer(t)
			hostPort := strconv.Itoa(host.LocalAddr().(*net.UDPAddr).Port)
			for _, server := range [][]string{{"@" + hostIP, "-p", hostPort}, {"@" + outside}, {"@" + outside, "+tcp"}} {
				out, _, code := n.exec(t, a.ID, append([]string{"dig", "+tries=1", "+time=2"}, append(server, "api.example.test")...)...)
				if code == 0 || strings.Contains(out, "ANSWER SECTION") {
					t.Errorf("dig %v answered from the sandbox (exit %d):\n%s", server, code, out)
				}
			}
			for _, from := range arrivedBefore(t, got, "udp", net.JoinHostPort("127.0.0.1", hostPort)) {
				t.Errorf("a DNS server on the host received a query from %s", from)
			}
			if logs, _ := docker("logs", outsideName); strings.Contains(logs, "datagram from "+a.Address) {
				t.Errorf("the DNS server past the host received a query from the sandbox:\n%s", logs)
			}
		})

		t.Run("no Docker socket", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			if _, _, code := n.exec(t, a.ID, "test", "-d", "/var/run"); code != 0 {
				t.Fatal("control: /var/run is not visible, so the socket test proves nothing")
			}
			if _, _, code := n.exec(t, a.ID, "test", "-e", "/var/run/docker.sock"); code == 0 {
				t.Error("the Docker socket is visible in the sandbox")
			}
		})

		t.Run("another sandbox is out of reach", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			// B serves on its own port, which it reaches itself, but A cannot.
			b := n.lease(t, "api.example.test")
			_, errs, code := n.exec(t, b.ID, "sh", "-c",
				"nohup python3 -m http.server 8080 --bind 0.0.0.0 >/tmp/http.log 2>&1 & for i in 1 2 3 4 5 6 7 8 9 10; do curl --noproxy '*' -s -o /dev/null http://127.0.0.1:8080/ && exit 0; sleep 0.3; done; exit 1")
			if code != 0 {
				t.Fatalf("sandbox B could not serve to itself (control): %s", errs)
			}
			if out, code := n.tcpProbe(t, a.ID, b.Address, 8080); code == 0 || strings.Contains(out, "connected") {
				t.Errorf("sandbox A reached sandbox B at %s:8080: %s", b.Address, out)
			}
		})

		t.Run("a client that ignores the proxy goes out the one way, under the same rules", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			secret := n.demoSecret(t)
			// The name resolves to the gateway; the connection to its port 443 is redirected there,
			// and the credential is injected as for a proxied request.
			out, errs, code := n.exec(t, a.ID, "curl", "--noproxy", "*", "-sS", "-H", "Authorization: Bearer forged", "https://api.example.test/whoami")
			if code != 0 || !strings.Contains(out, "whoami ok") {
				t.Fatalf("curl without the proxy: exit %d %q %s", code, out, errs)
			}
			if seen := n.up.seen(); seen[len(seen)-1] != "Bearer "+secret {
				t.Fatalf("upstream saw %q, want the injected credential", seen[len(seen)-1])
			}
			// A raw connection to a name outside the scopes, at an address of the sandbox's choosing
			// (the host's own here, so nothing can leave if this fails), is refused and recorded.
			out, errs, _ = n.exec(t, a.ID, "curl", "--noproxy", "*", "-sS", "-v", "--resolve", "evil.example:443:"+hostIP, "https://evil.example/")
			if !strings.Contains(errs, "403") || !strings.Contains(strings.ToLower(errs), "x-airlock-rule: scope-miss") {
				t.Errorf("TLS without the proxy to a name outside the scopes: %s %s", out, errs)
			}
			out, _, _ = n.exec(t, a.ID, "curl", "--noproxy", "*", "-sS", "--resolve", "evil.example:80:"+hostIP, "http://evil.example/")
			if !strings.Contains(out, "denied by rule scope-miss") {
				t.Errorf("plain HTTP without the proxy to a name outside the scopes: %q", out)
			}
			// Other ports stay closed.
			if out, code := n.tcpProbe(t, a.ID, hostIP, 8443); code == 0 || strings.Contains(out, "connected") {
				t.Errorf("port 8443 on the host is reachable: %s", out)
			}
			dest := func(recs []audit.Record) map[string]bool {
				got := map[string]bool{}
				for _, r := range recs {
					if r.Dest != "" {
						got[r.Host+" "+string(r.Decision)+" "+r.Dest] = true
					}
				}
				return got
			}
			want := []string{"api.example.test allow " + hostIP + ":443", "evil.example deny " + hostIP + ":443", "evil.example deny " + hostIP + ":80"}
			got := dest(n.trailUntil(t, a.ID, func(recs []audit.Record) bool { return hasAll(dest(recs), want...) }))
			for _, w := range want {
				if !got[w] {
					t.Errorf("no record %q of a redirected connection (have %v)", w, got)
				}
			}
		})

		t.Run("no IPv6, not even to the host's link-local address", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			out, errs, code := n.exec(t, a.ID, "bash", "-c", "cat /proc/sys/net/ipv6/conf/all/disable_ipv6; ip -6 addr")
			if code != 0 {
				t.Fatalf("probe: exit %d: %s", code, errs)
			}
			// gVisor's netstack has no IPv6 sysctls (the file is not there): under it, the
			// addresses below are what tell.
			if first := strings.SplitN(out, "\n", 2)[0]; first != "1" && !(n.template == "gvisor" && first == "") {
				t.Errorf("disable_ipv6 = %q, want 1", first)
			}
			if strings.Contains(out, "inet6") {
				t.Errorf("the sandbox has IPv6 addresses:\n%s", out)
			}
			// The host's side of the bridge has a link-local IPv6 address; a listener on every
			// address of the host is out of reach over it.
			ll, err := exec.Command("ip", "-6", "-o", "addr", "show", "dev", n.spec.Bridge, "scope", "link").CombinedOutput()
			f := strings.Fields(string(ll))
			if err != nil || len(f) < 4 {
				t.Skipf("the bridge has no link-local IPv6 address (%v): nothing to reach", err)
			}
			addr := strings.Split(f[3], "/")[0]
			l, err := net.Listen("tcp", "[::]:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			port := l.Addr().(*net.TCPAddr).Port
			script := fmt.Sprintf("import socket,sys\ns=socket.socket(socket.AF_INET6)\ns.settimeout(3)\ntry:\n s.connect(('%s%%eth0',%d,0,0))\n print('connected')\nexcept OSError as e:\n print('refused', e)", addr, port)
			if out, _, _ := n.exec(t, a.ID, "python3", "-c", script); strings.Contains(out, "connected") {
				t.Errorf("the sandbox reached the host over IPv6 link-local %s: %s", addr, out)
			}
		})
	})
}

// outsideName is the container startOutsideServer runs.
const outsideName = "airlock-e2e-outside"

// startOutsideServer runs, in a container on a routed Docker network of the test's own (not the
// sandbox network), a web server on port 8080 and a UDP echo server on port 53 that logs each
// datagram's source; it checks that the host reaches both, and returns the address.
func startOutsideServer(t *testing.T) string {
	t.Helper()
	const name, addr = outsideName, "10.215.0.10"
	docker("rm", "-f", name)
	docker("network", "rm", name)
	if out, err := docker("network", "create", "--subnet", "10.215.0.0/24", name); err != nil {
		t.Fatalf("creating the outside network: %v: %s", err, out)
	}
	t.Cleanup(func() {
		docker("rm", "-f", name)
		docker("network", "rm", name)
	})
	const echo = `import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 53))
while True:
    d, a = s.recvfrom(4096)
    print("datagram from", a[0], flush=True)
    s.sendto(d, a)
`
	if out, err := docker("run", "-d", "--name", name, "--network", name, "--ip", addr, "airlock/default:latest",
		"sh", "-c", `python3 -c "$1" & exec python3 -m http.server 8080 --directory /tmp`, "outside", echo); err != nil {
		t.Fatalf("starting the outside server: %v: %s", err, out)
	}
	eventually(t, 20*time.Second, "the host to reach the outside server's TCP port 8080 (the control)", func() bool {
		c, err := net.DialTimeout("tcp", addr+":8080", time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	eventually(t, 20*time.Second, "the outside server to echo a datagram the host sends to its UDP port 53 (the control)", func() bool {
		c, err := net.Dial("udp", addr+":53")
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Write([]byte("ping")); err != nil {
			return false
		}
		buf := make([]byte, 16)
		k, err := c.Read(buf)
		return err == nil && string(buf[:k]) == "ping"
	})
	return addr
}
