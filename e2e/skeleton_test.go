package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/pool/api"
	"github.com/airlock-dev/airlock/pool/client"
)

// scanScript looks for two values everywhere a sandbox process can look: every process's
// environment and arguments, and every readable file. The values arrive XOR-masked so that the
// scanner's own arguments do not contain them.
const scanScript = `
import os, sys
key = bytes.fromhex(sys.argv[1])
targets = {}
for arg in sys.argv[2:]:
    name, enc = arg.split('=')
    enc = bytes.fromhex(enc)
    targets[name] = bytes(a ^ b for a, b in zip(enc, key))
me = str(os.getpid())
hits = []
for pid in os.listdir('/proc'):
    if not pid.isdigit() or pid == me:
        continue
    for f in ('environ', 'cmdline'):
        try:
            data = open('/proc/%s/%s' % (pid, f), 'rb').read()
        except OSError:
            continue
        for name, v in targets.items():
            if v in data:
                hits.append('FOUND %s /proc/%s/%s' % (name, pid, f))
n = 0
for root, dirs, files in os.walk('/'):
    if root == '/':
        dirs[:] = [d for d in dirs if d not in ('proc', 'sys', 'dev')]
    for fn in files:
        p = os.path.join(root, fn)
        try:
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, 'rb') as fh:
                data = fh.read()
        except OSError:
            continue
        n += 1
        for name, v in targets.items():
            if v in data:
                hits.append('FOUND %s %s' % (name, p))
print('scanned %d files' % n)
print('\n'.join(hits))
`

func sha256sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

func mask(key, v []byte) string {
	out := make([]byte, len(v))
	for i := range v {
		out[i] = v[i] ^ key[i%len(key)]
	}
	return hex.EncodeToString(out)
}

// TestNode drives one real node through the walking skeleton's path and attacks its invariants.
// The steps share the node and run in order.
func TestNode(t *testing.T) {
	dir := t.TempDir()
	state := dir + "/state"
	up := startUpstream(t)
	cfg := writeConfig(t, dir, up)
	n := startNode(t, state, cfg)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			n.stop(t)
		}
	})
	secret := vaultSecret(t, n.client)
	a := n.lease(t, "api.example.test=demo")
	var portURL string // set by the port test, checked after release

	t.Run("credential injected through the gateway", func(t *testing.T) {
		out, errs, code := n.exec(t, a.ID, "curl", "-sS", "-H", "Authorization: Bearer forged-by-sandbox", "https://api.example.test/whoami")
		if code != 0 || !strings.Contains(out, "whoami ok") {
			t.Fatalf("curl through the gateway: exit %d, out %q, err %q", code, out, errs)
		}
		seen := up.seen()
		if len(seen) == 0 || seen[len(seen)-1] != "Bearer "+secret {
			t.Fatalf("upstream saw Authorization %q, want the Vault credential (and never the sandbox's own)", seen)
		}
	})

	t.Run("a per-task Vault token is minted on first use and revoked at release", func(t *testing.T) {
		l := n.lease(t, "api.example.test=vault-task")
		if _, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 {
			t.Fatalf("curl: %s", errs)
		}
		up.mu.Lock()
		tok := up.vaultToken[len(up.vaultToken)-1]
		up.mu.Unlock()
		root := vaultClient(t, n.client)
		info, err := root.Auth().Token().Lookup(tok)
		if err != nil {
			t.Fatalf("the injected token is not a live Vault token: %v", err)
		}
		if md, _ := info.TokenMetadata(); md["airlock_lease"] != l.ID {
			t.Fatalf("token metadata %v, want lease %s", md, l.ID)
		}
		if _, errs, code := n.cli(t, "release", l.ID); code != 0 {
			t.Fatalf("release: %s", errs)
		}
		if _, err := root.Auth().Token().Lookup(tok); err == nil {
			t.Fatal("the task's Vault token survived the release")
		}
	})

	t.Run("a lease that expires mid-task loses its Vault token", func(t *testing.T) {
		l := n.lease(t, "api.example.test=vault-task")
		// Shorten it: renew to 8s from now (long enough to use it under load, short to wait).
		if _, errs, code := n.cli(t, "renew", l.ID, "--ttl", "8s"); code != 0 {
			t.Fatalf("renew: %s", errs)
		}
		if _, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 {
			t.Fatalf("curl: %s", errs)
		}
		up.mu.Lock()
		tok := up.vaultToken[len(up.vaultToken)-1]
		up.mu.Unlock()
		root := vaultClient(t, n.client)
		if _, err := root.Auth().Token().Lookup(tok); err != nil {
			t.Fatalf("the task token is not live: %v", err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := root.Auth().Token().Lookup(tok); err != nil {
				break // revoked by the reaper, or expired with the lease
			}
			if time.Now().After(deadline) {
				t.Fatal("the expired lease's Vault token is still live 20s later")
			}
			time.Sleep(200 * time.Millisecond)
		}
		if _, errs, code := n.exec(t, l.ID, "true"); code == 0 || !(strings.Contains(errs, "lease_not_found") || strings.Contains(errs, "expired")) {
			t.Fatalf("the expired lease still runs commands: %s", errs)
		}
	})

	t.Run("injected value scrubbed from responses", func(t *testing.T) {
		out, errs, code := n.exec(t, a.ID, "curl", "-sS", "-D", "-", "https://api.example.test/echo")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if strings.Contains(out, secret) || !strings.Contains(out, "you sent: Bearer [redacted]") || !strings.Contains(strings.ToLower(out), "x-echo: bearer [redacted]") {
			t.Fatalf("response reached the sandbox unscrubbed:\n%s", out)
		}
	})

	t.Run("host outside the scopes refused by gateway and resolver", func(t *testing.T) {
		out, _, _ := n.exec(t, a.ID, "curl", "-sS", "http://evil.example/")
		if !strings.Contains(out, "denied by rule scope-miss") || !strings.Contains(out, "evil.example") {
			t.Fatalf("plain HTTP refusal not readable: %q", out)
		}
		_, errs, code := n.exec(t, a.ID, "curl", "-sS", "-v", "https://evil.example/")
		if code == 0 || !strings.Contains(errs, "403") || !strings.Contains(errs, "X-Airlock-Reason: task "+a.Task+" has no scope allowing evil.example:443") {
			t.Fatalf("CONNECT refusal: exit %d, stderr:\n%s", code, errs)
		}
		out, _, _ = n.exec(t, a.ID, "dig", "+tries=1", "+time=3", "evil.example")
		if !strings.Contains(out, "status: REFUSED") || !strings.Contains(out, "Blocked") || !strings.Contains(out, "no scope for evil.example") {
			t.Fatalf("resolver refusal not readable:\n%s", out)
		}
		// An allowed name resolves through the same resolver.
		out, _, code = n.exec(t, a.ID, "getent", "hosts", "api.example.test")
		if code != 0 || !strings.Contains(out, "api.example.test") {
			t.Fatalf("allowed name did not resolve: exit %d %q", code, out)
		}
	})

	t.Run("every decision is one audit record", func(t *testing.T) {
		recs := n.auditRecords(t)
		find := func(pred func(audit.Record) bool) *audit.Record {
			for i := range recs {
				if recs[i].Lease == a.ID && recs[i].Task == a.Task && pred(recs[i]) {
					return &recs[i]
				}
			}
			return nil
		}
		checks := map[string]func(audit.Record) bool{
			"http allow with credential": func(r audit.Record) bool {
				return r.Kind == audit.KindHTTP && r.Decision == audit.Allow && r.Host == "api.example.test" &&
					r.Path == "/whoami" && r.Rule == "scope" && r.Credential == "demo" && r.Status == 200 && r.Upstream != ""
			},
			"http deny": func(r audit.Record) bool {
				return r.Kind == audit.KindHTTP && r.Decision == audit.Deny && r.Host == "evil.example" && r.Rule == "scope-miss"
			},
			"dns deny": func(r audit.Record) bool {
				return r.Kind == audit.KindDNS && r.Decision == audit.Deny && r.QName == "evil.example." && r.Rule == "scope-miss"
			},
			"dns allow": func(r audit.Record) bool {
				return r.Kind == audit.KindDNS && r.Decision == audit.Allow && r.QName == "api.example.test."
			},
			"lease bind": func(r audit.Record) bool { return r.Kind == audit.KindLease && r.Event == "bind" },
			"exec": func(r audit.Record) bool {
				return r.Kind == audit.KindExec && len(r.Command) > 0 && r.Command[0] == "curl" && r.ExitCode != nil
			},
		}
		for name, pred := range checks {
			if find(pred) == nil {
				t.Errorf("no audit record: %s", name)
			}
		}
		for _, r := range recs {
			if strings.Contains(r.Reason, secret) {
				t.Fatalf("secret value in audit record %d", r.Seq)
			}
		}
	})

	t.Run("what a sandbox sends cannot break the trail or widen a scope", func(t *testing.T) {
		code := func(args ...string) string {
			t.Helper()
			out, _, _ := n.exec(t, a.ID, append([]string{"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...)
			return strings.TrimSpace(out)
		}
		// A path holding bytes that are not UTF-8, and terminal escapes.
		code("--path-as-is", "https://api.example.test/%ff%1b%5b2J")
		// Paths that servers resolve to another path are refused before the credential goes.
		for _, p := range []string{"/x/%2e%2e/whoami", "/x//../whoami", "/x/y/../../whoami"} {
			if c := code("--path-as-is", "https://api.example.test"+p); c != "400" {
				t.Errorf("%s answered %s, want 400", p, c)
			}
		}
		// The credential never goes in clear text.
		if c := code("http://api.example.test/whoami"); c != "403" {
			t.Errorf("plain http with a credential scope answered %s, want 403", c)
		}
		// A file whose name is not UTF-8.
		if _, errs, c := n.cliStdin(t, strings.NewReader("x"), "cp", "-", a.ID+":bad-\xff-name"); c != 0 {
			t.Errorf("uploading a file with a non-UTF-8 name: %s", errs)
		}
		out, errs, c := n.cli(t, "logs", "--lease", a.ID)
		if c != 0 || strings.Contains(out, "\x1b[2J") || strings.Contains(errs, "warning") {
			t.Fatalf("airlock logs after hostile bytes: exit %d, %s\n%s", c, errs, out)
		}
		rules := map[string]bool{}
		for _, r := range n.auditRecords(t) { // fails on any line that does not verify
			if r.Lease == a.ID {
				rules[r.Rule.String()] = true
			}
		}
		for _, rule := range []string{"ambiguous-path", "cleartext-credential"} {
			if !rules[rule] {
				t.Errorf("no audit record under rule %s (have %v)", rule, rules)
			}
		}
	})

	t.Run("no secret inside the sandbox", func(t *testing.T) {
		key := make([]byte, 32)
		rand.Read(key)
		marker := "control-" + hex.EncodeToString(key[:8])
		// Positive control: a value the scan must find, so a scan that sees nothing fails.
		if _, errs, code := n.exec(t, a.ID, "sh", "-c", "printf %s \""+marker+"\" > /workspace/control"); code != 0 {
			t.Fatalf("writing control: %s", errs)
		}
		out, errs, code := n.exec(t, a.ID, "python3", "-c", scanScript, hex.EncodeToString(key),
			"secret="+mask(key, []byte(secret)), "control="+mask(key, []byte(marker)))
		if code != 0 {
			t.Fatalf("scan failed: exit %d: %s", code, errs)
		}
		if !strings.Contains(out, "FOUND control /workspace/control") {
			t.Fatalf("scan did not find its control value, so it proves nothing:\n%s", out)
		}
		if strings.Contains(out, "FOUND secret") {
			t.Fatalf("credential found inside the sandbox:\n%s", out)
		}
		// Nor in what the engine holds about the container (env, args, labels, mounts).
		insp, err := docker(t, "inspect", a.Sandbox)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(insp, secret) || strings.Contains(insp, n.client.VaultToken) || strings.Contains(insp, n.client.Token) {
			t.Fatal("a secret appears in the container's configuration")
		}
		// The task JWT stays outside too: the sandbox's environment names no token.
		out, _, _ = n.exec(t, a.ID, "env")
		if strings.Contains(out, "eyJ") {
			t.Fatalf("a JWT is in the sandbox environment:\n%s", out)
		}
	})

	t.Run("one way out", func(t *testing.T) {
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
		accepted := make(chan string, 4)
		for _, l := range []net.Listener{specific, wildcard} {
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c.RemoteAddr().String()
					c.Close()
				}
			}()
		}
		tcpProbe := func(host string, port int) (string, int) {
			out, errs, code := n.exec(t, a.ID, "timeout", "5", "bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+strconv.Itoa(port)+" && echo connected")
			return out + errs, code
		}
		// Control: the gateway port on the same address is reachable, so the probe works.
		if out, code := tcpProbe(hostIP, 3128); code != 0 || !strings.Contains(out, "connected") {
			t.Fatalf("control probe to the gateway failed (exit %d): %s", code, out)
		}
		for _, port := range []int{specific.Addr().(*net.TCPAddr).Port, wildcard.Addr().(*net.TCPAddr).Port} {
			if out, code := tcpProbe(hostIP, port); code == 0 || strings.Contains(out, "connected") {
				t.Errorf("sandbox reached host port %d on the bridge address: %s", port, out)
			}
		}
		select {
		case from := <-accepted:
			t.Errorf("host listener accepted a connection from %s", from)
		case <-time.After(200 * time.Millisecond):
		}

		// Nothing past the host: a server on another Docker network of the test's own, which
		// the host itself reaches, is out of the sandbox's reach.
		outside := startOutsideServer(t)
		if out, code := tcpProbe(outside, 8080); code == 0 || strings.Contains(out, "connected") {
			t.Errorf("sandbox reached %s:8080 on another network through the host: %s", outside, out)
		}
		// No Docker socket.
		if _, _, code := n.exec(t, a.ID, "test", "-e", "/var/run/docker.sock"); code == 0 {
			t.Error("the Docker socket is visible in the sandbox")
		}

		// Another sandbox: it serves on its own port, which it reaches itself, but the first
		// sandbox cannot.
		b := n.lease(t, "api.example.test")
		_, errs, code := n.exec(t, b.ID, "sh", "-c",
			"nohup python3 -m http.server 8080 --bind 0.0.0.0 >/tmp/http.log 2>&1 & for i in 1 2 3 4 5 6 7 8 9 10; do curl --noproxy '*' -s -o /dev/null http://127.0.0.1:8080/ && exit 0; sleep 0.3; done; exit 1")
		if code != 0 {
			t.Fatalf("sandbox B could not serve to itself (control): %s", errs)
		}
		if out, code := tcpProbe(b.Address, 8080); code == 0 || strings.Contains(out, "connected") {
			t.Errorf("sandbox A reached sandbox B at %s:8080: %s", b.Address, out)
		}
		if _, _, code := n.cli(t, "release", b.ID); code != 0 {
			t.Error("releasing B failed")
		}
	})

	t.Run("hardened: no setuid files, limits, no IPv6, not root", func(t *testing.T) {
		if out, errs, code := n.exec(t, a.ID, "sh", "-c", "find / -xdev -type f \\( -perm -4000 -o -perm -2000 \\) 2>/dev/null"); strings.TrimSpace(out) != "" {
			t.Errorf("setuid or setgid files in the sandbox (exit %d, %s):\n%s", code, errs, out)
		}
		out, errs, code := n.exec(t, a.ID, "bash", "-c", "echo $(id -u):$(id -g) $(ulimit -n) $(ulimit -u) $(cat /proc/sys/net/ipv6/conf/all/disable_ipv6); ip -6 addr")
		if code != 0 {
			t.Fatalf("probe: exit %d: %s", code, errs)
		}
		if first := strings.SplitN(out, "\n", 2)[0]; first != "10001:10001 4096 4096 1" {
			t.Errorf("uid:gid nofile nproc ipv6-disabled = %q, want \"10001:10001 4096 4096 1\"", first)
		}
		if strings.Contains(out, "inet6") {
			t.Errorf("the sandbox has IPv6 addresses:\n%s", out)
		}
		// The host's side of the bridge has a link-local IPv6 address; a listener on every
		// address of the host is out of reach over it.
		ll, err := exec.Command("ip", "-6", "-o", "addr", "show", "dev", testBridge, "scope", "link").CombinedOutput()
		if f := strings.Fields(string(ll)); err == nil && len(f) >= 4 {
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
		}
	})

	t.Run("a token from the operator's issuer leases and explains", func(t *testing.T) {
		tok := mintToken(t, "task-jwt", []map[string]any{
			{"host": "api.example.test", "methods": []string{"GET"}, "paths": []string{"/whoami"}, "credential": "demo"},
		}, 10*time.Minute)
		out, errs, code := n.cli(t, "explain", "--token", tok, "https://api.example.test/whoami")
		if code != 0 || !strings.Contains(out, "allow GET https://api.example.test/whoami") || !strings.Contains(out, "credential demo") {
			t.Fatalf("explain allow: exit %d\n%s%s", code, out, errs)
		}
		out, _, code = n.cli(t, "explain", "--token", tok, "--method", "POST", "https://api.example.test/whoami")
		if code != 1 || !strings.Contains(out, "deny") || !strings.Contains(out, "scope-miss") {
			t.Fatalf("explain deny: exit %d\n%s", code, out)
		}
		out, errs, code = n.cli(t, "lease", "--json", "--token", tok)
		if code != 0 {
			t.Fatalf("lease with the issuer's token: %s", errs)
		}
		var l leaseJSON
		json.Unmarshal([]byte(out), &l)
		out, errs, code = n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami")
		if code != 0 || !strings.Contains(out, "whoami ok") {
			t.Fatalf("curl under the issuer's token: exit %d %s %s", code, out, errs)
		}
		// The same token (same jti) cannot bind a second lease.
		if _, errs, code := n.cli(t, "lease", "--token", tok); code == 0 || !strings.Contains(errs, "jti") {
			t.Fatalf("second lease with one jti: exit %d %s", code, errs)
		}
		// A token swap (same task) narrows the scopes at once; another task's token is refused.
		cl := &client.Client{Addr: n.client.Addr, Token: n.client.Token}
		narrow := mintToken(t, "task-jwt", []map[string]any{{"host": "other.example"}}, 10*time.Minute)
		if _, err := cl.SwapToken(context.Background(), l.ID, narrow); err != nil {
			t.Fatalf("token swap: %v", err)
		}
		out, _, _ = n.exec(t, l.ID, "curl", "-sS", "http://api.example.test/whoami")
		if !strings.Contains(out, "scope-miss") {
			t.Fatalf("after the swap the old scope still works: %s", out)
		}
		if _, err := cl.SwapToken(context.Background(), l.ID, mintToken(t, "another-task", nil, time.Minute)); err == nil || !strings.Contains(err.Error(), "is for task") {
			t.Fatalf("swap to another task's token = %v", err)
		}
		// A token that names the credential for a host outside the catalog's list is refused
		// at lease time.
		bad := mintToken(t, "task-bad", []map[string]any{{"host": "evil.example", "credential": "demo"}}, 10*time.Minute)
		if _, errs, code := n.cli(t, "lease", "--token", bad); code == 0 || !strings.Contains(errs, "may not be sent to evil.example") {
			t.Fatalf("lease with a widened credential: exit %d %s", code, errs)
		}
		n.cli(t, "release", l.ID)
	})

	t.Run("exec streams stdin, exit codes and timeouts", func(t *testing.T) {
		out, _, code := n.cliStdin(t, strings.NewReader("hello\n"), "exec", a.ID, "-i", "--", "tr", "a-z", "A-Z")
		if code != 0 || out != "HELLO\n" {
			t.Fatalf("stdin: exit %d %q", code, out)
		}
		big := strings.Repeat("x", 3<<20)
		out, _, code = n.cliStdin(t, strings.NewReader(big), "exec", a.ID, "-i", "--", "wc", "-c")
		if code != 0 || strings.TrimSpace(out) != strconv.Itoa(len(big)) {
			t.Fatalf("3 MiB of stdin: exit %d %q", code, out)
		}
		out, _, code = n.exec(t, a.ID, "head", "-c", "20000000", "/dev/zero")
		if code != 0 || len(out) != 20000000 {
			t.Fatalf("20 MB of output: exit %d, %d bytes", code, len(out))
		}
		if _, _, code := n.exec(t, a.ID, "sh", "-c", "exit 7"); code != 7 {
			t.Fatalf("exit code %d, want 7", code)
		}
		// Env and workdir per command, through the Go client.
		cl := &client.Client{Addr: n.client.Addr, Token: n.client.Token}
		var stdout, stderr bytes.Buffer
		n.exec(t, a.ID, "mkdir", "-p", "/workspace/wd")
		code, err := cl.Exec(context.Background(), a.ID, api.ExecRequest{Cmd: []string{"sh", "-c", `echo "$GREETING from $(pwd)" >&2`},
			Env: map[string]string{"GREETING": "hi"}, Workdir: "/workspace/wd"}, &stdout, &stderr)
		if err != nil || code != 0 || stderr.String() != "hi from /workspace/wd\n" || stdout.Len() != 0 {
			t.Fatalf("env/workdir/stderr: %d %v out=%q err=%q", code, err, stdout.String(), stderr.String())
		}
		// A timeout kills the command and everything it started.
		start := time.Now()
		_, errs, code := n.cli(t, "exec", a.ID, "--timeout", "1s", "--", "sh", "-c", "sleep 300 & sleep 300")
		if code == 0 || !strings.Contains(errs, "timed out") || time.Since(start) > 20*time.Second {
			t.Fatalf("timeout: exit %d after %s: %s", code, time.Since(start), errs)
		}
		time.Sleep(200 * time.Millisecond)
		if out, _, _ := n.exec(t, a.ID, "ps", "-eo", "stat,args"); strings.Contains(out, "sleep 300") || strings.Contains(out, "defunct") {
			t.Fatalf("processes left (or unreaped) after the timeout:\n%s", out)
		}
	})

	t.Run("a reviewed port is served on its own listener", func(t *testing.T) {
		if _, errs, code := n.exec(t, a.ID, "sh", "-c",
			"mkdir -p /workspace/site && echo review-me > /workspace/site/index.html && cd /workspace/site && "+
				"nohup python3 -m http.server 8000 >/tmp/site.log 2>&1 & for i in 1 2 3 4 5 6 7 8 9 10; do curl --noproxy '*' -s -o /dev/null http://127.0.0.1:8000/ && exit 0; sleep 0.3; done; exit 1"); code != 0 {
			t.Fatalf("starting the site: %s", errs)
		}
		out, errs, code := n.cli(t, "port", a.ID, "8000")
		if code != 0 {
			t.Fatalf("airlock port: %s", errs)
		}
		u := strings.TrimSpace(out)
		portURL = u
		if strings.Contains(u, strings.TrimPrefix(n.client.Addr, "http://")) {
			t.Fatalf("the port shares the API's origin: %s", u)
		}
		jar, _ := cookiejar.New(nil)
		hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "review-me\n" {
			t.Fatalf("through the port URL: %d %q", resp.StatusCode, body)
		}
		base, _ := url.Parse(u)
		base.RawQuery = ""
		if resp, err := http.Get(base.String()); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("without the capability: %v %v", resp, err)
		}
		forged := *base
		forged.RawQuery = "airlock_port=" + strings.Repeat("0", 48)
		if resp, err := http.Get(forged.String()); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("with a forged capability: %v %v", resp, err)
		}
	})

	t.Run("files, renew and logs", func(t *testing.T) {
		src := t.TempDir() + "/in.bin"
		data := make([]byte, 3<<20)
		rand.Read(data)
		os.WriteFile(src, data, 0o600)
		if _, errs, code := n.cli(t, "cp", src, a.ID+":/workspace/sub/in.bin"); code != 0 {
			t.Fatalf("upload: %s", errs)
		}
		out, _, code := n.exec(t, a.ID, "sha256sum", "/workspace/sub/in.bin")
		if code != 0 || !strings.HasPrefix(out, hex.EncodeToString(sha256sum(data))) {
			t.Fatalf("uploaded file differs: %s", out)
		}
		dst := t.TempDir() + "/out.bin"
		if _, errs, code := n.cli(t, "cp", a.ID+":sub/in.bin", dst); code != 0 {
			t.Fatalf("download: %s", errs)
		}
		if got, _ := os.ReadFile(dst); string(got) != string(data) {
			t.Fatal("downloaded file differs")
		}
		// A directory as a tar archive, in and out; an archive with a ../ member is refused.
		mkTar := func(files map[string]string) string {
			var tb bytes.Buffer
			tw := tar.NewWriter(&tb)
			for name, body := range files {
				tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
				tw.Write([]byte(body))
			}
			tw.Close()
			path := t.TempDir() + "/in.tar"
			os.WriteFile(path, tb.Bytes(), 0o600)
			return path
		}
		if _, errs, code := n.cli(t, "cp", "--tar", mkTar(map[string]string{"a.txt": "alpha", "sub/b.txt": "beta"}), a.ID+":/workspace/proj"); code != 0 {
			t.Fatalf("tar upload: %s", errs)
		}
		if out, _, _ := n.exec(t, a.ID, "cat", "/workspace/proj/sub/b.txt"); out != "beta" {
			t.Fatalf("unpacked file: %q", out)
		}
		_, errs, code := n.cli(t, "cp", "--tar", mkTar(map[string]string{"../escape.txt": "nope"}), a.ID+":/workspace/proj")
		if code == 0 || !strings.Contains(errs, "..") {
			t.Fatalf("an archive with a ../ member: exit %d %s", code, errs)
		}
		if _, _, code := n.exec(t, a.ID, "test", "-e", "/workspace/escape.txt"); code == 0 {
			t.Fatal("a ../ member escaped the target directory")
		}
		tarOut := t.TempDir() + "/out.tar"
		if _, errs, code := n.cli(t, "cp", "--tar", a.ID+":/workspace/proj", tarOut); code != 0 {
			t.Fatalf("tar download: %s", errs)
		}
		f, _ := os.Open(tarOut)
		names := map[string]bool{}
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			names[strings.TrimPrefix(h.Name, "./")] = true
		}
		f.Close()
		if !names["a.txt"] || !names["sub/b.txt"] {
			t.Fatalf("downloaded archive holds %v", names)
		}
		for _, bad := range []string{a.ID + ":/etc/passwd", a.ID + ":../../etc/passwd", a.ID + ":/workspace/../etc/shadow"} {
			if _, errs, code := n.cli(t, "cp", bad, t.TempDir()+"/x"); code == 0 || !strings.Contains(errs, "outside the workspace") {
				t.Errorf("download of %s: exit %d %s", bad, code, errs)
			}
		}
		renew := func(ttl string) time.Time {
			t.Helper()
			out, errs, code := n.cli(t, "renew", a.ID, "--ttl", ttl, "--json")
			var l struct{ Expires time.Time }
			if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
				t.Fatalf("renew %s: exit %d %s %s", ttl, code, out, errs)
			}
			return l.Expires
		}
		if exp := renew("5m"); time.Until(exp) < 4*time.Minute || time.Until(exp) > 5*time.Minute {
			t.Fatalf("renew 5m: expires in %s", time.Until(exp))
		}
		// The dev token lives 10m from the lease (the template's default): a renewal never
		// carries the lease past it.
		if exp := renew("1h"); time.Until(exp) > 10*time.Minute {
			t.Fatalf("renew 1h outlived the token: expires in %s", time.Until(exp))
		}
		out, errs, code = n.cli(t, "logs", "--lease", a.ID, "--json")
		if code != 0 {
			t.Fatalf("logs: %s", errs)
		}
		kinds := map[string]bool{}
		for _, l := range lines(out) {
			var r audit.Record
			if json.Unmarshal([]byte(l), &r) == nil && r.Lease == a.ID {
				kinds[string(r.Kind)+"/"+r.Event] = true
			}
		}
		for _, k := range []string{"lease/bind", "lease/renew", "file/upload", "file/download", "file/upload-tar", "file/download-tar", "http/", "dns/", "exec/"} {
			if !kinds[k] {
				t.Errorf("logs --lease lacks a %s record (have %v)", k, kinds)
			}
		}
		out, _, _ = n.cli(t, "logs", "--lease", a.ID, "--decision", "deny")
		if !strings.Contains(out, "scope-miss") || strings.Contains(out, " allow ") {
			t.Errorf("logs --decision deny:\n%s", out)
		}
	})

	t.Run("airlock verify passes every check", func(t *testing.T) {
		out, errs, code := n.cli(t, "verify")
		if code != 0 || !strings.Contains(out, "checks passed") || strings.Contains(out, "FAIL") {
			t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
		}
		out, _, code = n.cli(t, "verify", "--json")
		var v struct {
			Failed int
			Checks []struct{ Passed bool }
		}
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Failed != 0 || len(v.Checks) < 12 {
			t.Fatalf("verify --json: exit %d %s", code, out)
		}
	})

	t.Run("release destroys the sandbox and the pool refills", func(t *testing.T) {
		if _, errs, code := n.cli(t, "release", a.ID); code != 0 {
			t.Fatalf("release: %s", errs)
		}
		if out, err := docker(t, "inspect", a.Sandbox); err == nil || !strings.Contains(strings.ToLower(out), "no such") {
			t.Fatalf("container %s still exists after release: %s", a.Sandbox[:12], out)
		}
		if _, errs, code := n.exec(t, a.ID, "true"); code == 0 || !strings.Contains(errs, "lease_not_found") {
			t.Fatalf("exec on a released lease: exit %d, %s", code, errs)
		}
		if portURL != "" {
			if resp, err := http.Get(portURL); err == nil {
				resp.Body.Close()
				t.Fatalf("the reviewed port still answers after release: %d", resp.StatusCode)
			}
		}
		deadline := time.Now().Add(90 * time.Second)
		for {
			out, _, _ := n.cli(t, "pools")
			if strings.Contains(out, "warm 2/2") && strings.Contains(out, "leased 0") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool did not refill: %s", out)
			}
			time.Sleep(250 * time.Millisecond)
		}
	})

	t.Run("stop removes everything", func(t *testing.T) {
		resp, err := http.Get(n.client.Addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		n.stop(t)
		stopped = true
		checkClean(t, state)
		if t.Failed() {
			t.Logf("node output:\n%s", n.log)
		}

		// No secret value anywhere the run wrote: the node's own output, the audit trail, the
		// metrics. (The values are the demo credential, every per-task Vault token the
		// upstream received, and the dev Vault's root token.)
		trail, err := os.ReadFile(n.client.Audit)
		if err != nil {
			t.Fatal(err)
		}
		up.mu.Lock()
		values := append([]string{secret, n.client.VaultToken}, up.vaultToken...)
		up.mu.Unlock()
		for _, v := range values {
			if len(v) < 8 {
				continue
			}
			for name, text := range map[string]string{"node output": n.log.String(), "audit trail": string(trail), "metrics": string(metrics)} {
				if strings.Contains(text, v) {
					t.Errorf("a secret value (%.6s...) appears in the %s", v, name)
				}
			}
		}
		if !strings.Contains(string(metrics), "airlock_gateway_requests_total") || !strings.Contains(string(metrics), "airlock_pool_sandboxes") {
			t.Errorf("metrics lack the gateway or pool series")
		}
	})

	t.Run("restart after kill -9 cleans up", func(t *testing.T) {
		n = startNode(t, state, cfg)
		stopped = false
		before := managedContainers(t)
		l := n.lease(t, "api.example.test")
		n.kill() // no cleanup runs; redis and vault die with it
		if left := managedContainers(t); len(left) == 0 {
			t.Fatal("kill -9 left nothing behind, so this test proves nothing")
		}
		n = startNode(t, state, cfg)
		for _, id := range append(before, l.Sandbox) {
			if out, err := docker(t, "inspect", id); err == nil {
				t.Errorf("container %s from the killed node survived the restart: %s", id[:12], lines(out)[0])
			}
		}
		if _, errs, code := n.exec(t, l.ID, "true"); code == 0 {
			t.Errorf("lease of the killed node still usable: %s", errs)
		}
		n.stop(t)
		stopped = true
		checkClean(t, state)
	})
}

// startOutsideServer runs a web server in a container on a routed Docker network of the test's
// own (not the sandbox network), checks that the host reaches it, and returns its address.
func startOutsideServer(t *testing.T) string {
	t.Helper()
	const name = "airlock-e2e-outside"
	docker(t, "rm", "-f", name)
	docker(t, "network", "rm", name)
	if out, err := docker(t, "network", "create", "--subnet", "10.215.0.0/24", name); err != nil {
		t.Fatalf("creating the outside network: %v: %s", err, out)
	}
	t.Cleanup(func() {
		docker(t, "rm", "-f", name)
		docker(t, "network", "rm", name)
	})
	if out, err := docker(t, "run", "-d", "--name", name, "--network", name, "--ip", "10.215.0.10",
		"airlock/default:latest", "python3", "-m", "http.server", "8080", "--directory", "/tmp"); err != nil {
		t.Fatalf("starting the outside server: %v: %s", err, out)
	}
	const addr = "10.215.0.10"
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr+":8080", time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("control: the host cannot reach the outside server: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBadConfigStopsStartup checks that a wrong field stops `airlock up` with its name, before
// anything is started.
func TestBadConfigStopsStartup(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/bad.yaml"
	if err := os.WriteFile(path, []byte("templates:\n  - name: big\n    memory_mb: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(airlockBin, "up", "--config", path)
	cmd.Env = append(os.Environ(), "AIRLOCK_STATE_DIR="+dir+"/state")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "templates[0].memory_mb: must be >= 16") {
		t.Fatalf("airlock up with a bad config: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "panic") {
		t.Fatalf("panicked:\n%s", out)
	}
}
