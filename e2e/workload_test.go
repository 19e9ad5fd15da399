package e2e

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// An agent's real work in the two toolchain templates: it makes a virtualenv, installs a
// package from PyPI (which the gateway sends to the operator's mirror, TLS intercepted), runs
// the package's console script and the tests of a project it copied in; it installs an npm
// package from a registry an operator's profile allows and runs its node_modules/.bin command.
// Clients that ignore the proxy go out the same one way.
func TestWorkload(t *testing.T) {
	n := sharedNode(t)
	hostIP := n.spec.hostIP()

	t.Run("python: venv, pip install through a mirror, console script, pytest on a copied project", func(t *testing.T) {
		start := time.Now()
		a := n.leaseWith(t, "--template", "python", "--allow", "@pypi", "--allow", "api.example.test=demo")
		t.Logf("lease of the python template took %s", time.Since(start))
		project := tarOf(t, map[string]string{
			"proj/test_hello.py": "import hello_airlock\n\n\ndef test_add():\n    assert hello_airlock.add(2, 3) == 5\n",
			"proj/README":        "a project the agent wrote\n",
		})
		if _, errs, code := n.cli(t, "cp", "--tar", project, a.ID+":/workspace"); code != 0 {
			t.Fatalf("airlock cp of the project: %s", errs)
		}
		// pytest comes from the template (Debian's), pip installs into the venv from the index.
		script := `set -e
python3 -m venv --system-site-packages /workspace/venv
/workspace/venv/bin/pip install --disable-pip-version-check --no-cache-dir --progress-bar off hello-airlock
/workspace/venv/bin/hello-airlock
cd /workspace/proj && /workspace/venv/bin/python -m pytest -q -p no:cacheprovider`
		out, errs, code := n.cli(t, "exec", a.ID, "--timeout", "3m", "--", "bash", "-c", script)
		if code != 0 {
			t.Fatalf("the python workload: exit %d\n%s\n%s", code, out, errs)
		}
		for _, want := range []string{"Successfully installed hello-airlock-1.0", "hello from a console script", "1 passed"} {
			if !strings.Contains(out, want) {
				t.Errorf("the workload's output lacks %q:\n%s\n%s", want, out, errs)
			}
		}
		asked := strings.Join(n.up.registry.requests(), "\n")
		if !strings.Contains(asked, "/simple/hello-airlock/") || !strings.Contains(asked, "/packages/"+wheelName) {
			t.Errorf("the mirror was not asked for the index page and the wheel:\n%s", asked)
		}
		// The record names the host pip asked for and the mirror the gateway reached.
		recs := n.trailUntil(t, a.ID, func(recs []audit.Record) bool {
			return hasRecord(recs, "pypi.org", "/simple/hello-airlock/") && hasRecord(recs, "files.pythonhosted.org", "/packages/"+wheelName)
		})
		for _, r := range recs {
			if (r.Host == "pypi.org" || r.Host == "files.pythonhosted.org") && r.Decision == audit.Allow && r.Mirror != "https://"+mirrorHost+":443" {
				t.Errorf("record of %s%s names mirror %q, want https://%s:443", r.Host, r.Path, r.Mirror, mirrorHost)
			}
		}
		if !hasRecord(recs, "pypi.org", "/simple/hello-airlock/") || !hasRecord(recs, "files.pythonhosted.org", "/packages/"+wheelName) {
			t.Errorf("no allow record of the index page and the wheel")
		}

		// A client that ignores the proxy still gets the credential, through the redirect.
		out, errs, code = n.exec(t, a.ID, "curl", "--noproxy", "*", "-sS", "https://api.example.test/whoami")
		if code != 0 || !strings.Contains(out, "whoami ok") {
			t.Fatalf("curl --noproxy: exit %d %q %s", code, out, errs)
		}
		if seen := n.up.seen(); seen[len(seen)-1] != "Bearer "+n.demoSecret(t) {
			t.Errorf("the upstream saw %q, want the injected credential", seen[len(seen)-1])
		}
		// A raw connection on 443 to a host outside the scopes is refused and recorded.
		_, errs, _ = n.exec(t, a.ID, "curl", "--noproxy", "*", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--resolve", "evil.example:443:"+hostIP, "https://evil.example/x")
		recs = n.trailUntil(t, a.ID, func(recs []audit.Record) bool { return hasRecord(recs, "evil.example", "/x") })
		var refused bool
		for _, r := range recs {
			refused = refused || (r.Host == "evil.example" && r.Decision == audit.Deny && r.Dest == hostIP+":443")
		}
		if !refused {
			t.Errorf("no deny record of the raw connection to evil.example:443 (%s)", errs)
		}
	})

	t.Run("node: npm install from a registry a profile allows, then a node_modules/.bin command", func(t *testing.T) {
		start := time.Now()
		a := n.leaseWith(t, "--template", "node", "--allow", "@npm", "--allow", "api.example.test=demo")
		t.Logf("lease of the node template took %s", time.Since(start))
		script := `set -e
mkdir -p /workspace/app && cd /workspace/app
printf '{"name": "app", "version": "1.0.0", "private": true}\n' > package.json
npm install --no-audit --no-fund --registry https://` + npmHost + `/ hello-bin
./node_modules/.bin/hello-bin
npx --no-install hello-bin`
		out, errs, code := n.cli(t, "exec", a.ID, "--timeout", "3m", "--", "bash", "-c", script)
		if code != 0 {
			t.Fatalf("the node workload: exit %d\n%s\n%s", code, out, errs)
		}
		if strings.Count(out, "hello from node_modules/.bin") != 2 {
			t.Errorf("the installed command did not run twice:\n%s\n%s", out, errs)
		}
		// Node's own fetch reads no proxy variable before v24: it goes out through the redirect.
		out, errs, code = n.exec(t, a.ID, "node", "-e", "fetch('https://api.example.test/whoami').then(r => r.text()).then(t => console.log(t))")
		if code != 0 || !strings.Contains(out, "whoami ok") {
			t.Errorf("node fetch without the proxy: exit %d %q %s", code, out, errs)
		}
	})
}

func hasRecord(recs []audit.Record, host, path string) bool {
	for _, r := range recs {
		if r.Host == host && r.Path == path {
			return true
		}
	}
	return false
}

// tarOf writes files into a tar archive in a temporary folder and returns its path.
func tarOf(t *testing.T, files map[string]string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	path := filepath.Join(t.TempDir(), "in.tar")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
