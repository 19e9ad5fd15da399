package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
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

func mask(key, v []byte) string {
	out := make([]byte, len(v))
	for i := range v {
		out[i] = v[i] ^ key[i%len(key)]
	}
	return hex.EncodeToString(out)
}

// TestNoSecretsInside attacks invariant 1: no credential in a sandbox's environment, files,
// image or arguments, nor in anything the node writes; the task JWT stays outside.
func TestNoSecretsInside(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		secret := n.demoSecret(t)

		t.Run("a scan of every process and file finds no credential", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			// The sandbox has used the credential, so the gateway injected it for this lease.
			if out, errs, code := n.exec(t, a.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
				t.Fatalf("curl through the gateway: exit %d %q %q", code, out, errs)
			}
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
		})

		t.Run("nothing the engine holds about the container names a secret", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			insp, err := docker("inspect", a.Sandbox)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(insp, a.Sandbox) {
				t.Fatalf("docker inspect did not describe %s:\n%.300s", a.Sandbox, insp)
			}
			for name, v := range map[string]string{"the credential": secret, "the Vault token": n.client.VaultToken, "the API key": n.client.Token} {
				if strings.Contains(insp, v) {
					t.Errorf("%s appears in the container's configuration", name)
				}
			}
		})

		t.Run("the task JWT stays outside", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			out, _, code := n.exec(t, a.ID, "env")
			if code != 0 || !strings.Contains(out, "PATH=") {
				t.Fatalf("env: exit %d %q", code, out)
			}
			if strings.Contains(out, "eyJ") {
				t.Fatalf("a JWT is in the sandbox environment:\n%s", out)
			}
		})

		t.Run("no secret in the node's output, trail or metrics", func(t *testing.T) {
			a := n.lease(t, "api.example.test=vault-task")
			if _, errs, code := n.exec(t, a.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 {
				t.Fatalf("curl: %s", errs)
			}
			b := n.lease(t, "api.example.test=demo")
			if _, errs, code := n.exec(t, b.ID, "curl", "-sS", "https://api.example.test/echo"); code != 0 {
				t.Fatalf("curl: %s", errs)
			}
			n.trailUntil(t, b.ID, func(recs []audit.Record) bool { return hasAll(events(recs), "http/") })
			metrics := n.metrics(t)
			if !strings.Contains(metrics, "airlock_gateway_requests_total") {
				t.Fatalf("the metrics page lacks the gateway's series:\n%.500s", metrics)
			}
			// The values are the demo credential, every per-task Vault token the upstream
			// received, and the dev Vault's root token. TestMain checks the same once the node has
			// stopped, over everything the run wrote.
			values := append([]string{secret, n.client.VaultToken}, n.up.vaultTokens()...)
			for _, found := range n.secretsWritten(metrics, values...) {
				t.Error(found)
			}
		})
	})
}
