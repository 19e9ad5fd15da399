package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/client"
)

// probe is one invariant checked from inside a sandbox: a shell command and what its output
// must show.
type probe struct {
	name string
	cmd  string
	ok   func(out string, code int) bool
}

// probes never send traffic past the node: refusals by the resolver and the gateway are
// decided there, and direct connections target the node's own bridge address.
var probes = []probe{
	{"runs as a non-root user", "id -u", func(o string, c int) bool { return c == 0 && strings.TrimSpace(o) != "0" }},
	{"holds no capabilities", "grep CapEff /proc/self/status", func(o string, c int) bool {
		return c == 0 && strings.HasSuffix(strings.TrimSpace(o), "0000000000000000")
	}},
	{"cannot gain privileges (no_new_privs)", "grep NoNewPrivs /proc/self/status", func(o string, c int) bool { return strings.HasSuffix(strings.TrimSpace(o), "1") }},
	{"root filesystem is read-only", "touch /airlock-verify 2>&1; echo rc=$?", func(o string, c int) bool { return !strings.Contains(o, "rc=0") }},
	{"workspace is writable", `touch "$HOME/.airlock-verify" && rm "$HOME/.airlock-verify" && echo ok`, func(o string, c int) bool { return strings.Contains(o, "ok") }},
	{"no Docker socket", "test -e /var/run/docker.sock || test -e /run/docker.sock; echo rc=$?", func(o string, c int) bool { return strings.Contains(o, "rc=1") }},
	{"no credential-like environment variables", `env | grep -iE '^[^=]*(token|secret|password|passwd|api_?key|credential|vault|aws_)[^=]*=' | grep -v '^AWS_CA_BUNDLE=/etc/airlock/' || echo none`,
		func(o string, c int) bool { return strings.TrimSpace(o) == "none" }},
	{"resolver refuses a name outside the scopes", "getent hosts airlock-verify.example.com; echo rc=$?", func(o string, c int) bool { return !strings.Contains(o, "rc=0") }},
	{"gateway refuses a host outside the scopes", "curl -sS -o /dev/null -w '%{http_code}' http://airlock-verify.example.com/ 2>&1", func(o string, c int) bool { return strings.Contains(o, "403") }},
	{"gateway refuses the cloud metadata address", "curl -sS -o /dev/null -w '%{http_code}' http://169.254.169.254/latest/meta-data/ 2>&1", func(o string, c int) bool { return strings.Contains(o, "403") }},
	{"host ports other than gateway and resolver are closed", `gw=$(echo "$HTTPS_PROXY" | sed -E 's#.*//([^:/]+).*#\1#'); for p in 22 6379 7070 8200; do (exec 3<>/dev/tcp/$gw/$p) 2>/dev/null && echo "open $p"; done; echo done`,
		func(o string, c int) bool { return strings.TrimSpace(o) == "done" }},
	// Ports 80 and 443 are redirected to the gateway (or, with the redirect off, closed): a
	// client that ignores the proxy meets the same refusal.
	{"a client that ignores the proxy meets the gateway's rules", `gw=$(echo "$HTTPS_PROXY" | sed -E 's#.*//([^:/]+).*#\1#'); curl --noproxy '*' -sS -o /dev/null -w '%{http_code}' --resolve airlock-verify.example.com:80:$gw http://airlock-verify.example.com/ 2>/dev/null`,
		func(o string, c int) bool { o = strings.TrimSpace(o); return o == "403" || o == "000" }},
	{"the deployment CA is trusted and the gateway is the proxy", `test -s "$SSL_CERT_FILE" && test -n "$HTTPS_PROXY" && echo ok`, func(o string, c int) bool { return strings.Contains(o, "ok") }},
}

// cmdVerify leases a sandbox and checks the invariants from inside it.
func cmdVerify(args []string) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	template := fs.String("template", "default", "sandbox template")
	tok := fs.String("token", "", "a task token to lease with (default: a dev token with no scopes)")
	asJSON := fs.Bool("json", false, "print the checks as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req := apitype.LeaseRequest{Template: *template, Token: *tok, TTL: "5m"}
	if *tok == "" {
		req.Allow = []string{} // the dev issuer mints a token with no scopes at all
	}
	l, err := c.Lease(ctx, req)
	if err != nil {
		return fail(fmt.Errorf("leasing a sandbox to verify: %w", err))
	}
	defer c.Release(context.Background(), l.ID)
	type result struct {
		Check  string `json:"check"`
		Passed bool   `json:"passed"`
		Output string `json:"output,omitempty"`
	}
	var results []result
	// What the sandbox runs under: the template's runtime, and the kernel it sees.
	runtime := "unknown"
	if ps, err := c.Pools(ctx); err == nil {
		for _, p := range ps {
			if p.Template == l.Template && p.Runtime != "" {
				runtime = p.RuntimeName()
			}
		}
	}
	kernel, _, _ := run(ctx, c, l.ID, "uname -r")
	kernel = strings.TrimSpace(kernel)
	if !*asJSON {
		fmt.Printf("verifying lease %s (sandbox %.12s at %s, template %s, runtime %s, kernel %s)\n", l.ID, l.Sandbox, l.Address, l.Template, runtime, kernel)
	}
	failed := 0
	for _, p := range probes {
		out, code, err := run(ctx, c, l.ID, p.cmd)
		r := result{Check: p.name, Passed: err == nil && p.ok(out, code)}
		if !r.Passed {
			failed++
			r.Output = strings.TrimSpace(out + errString(err))
		}
		results = append(results, r)
		if *asJSON {
			continue
		}
		status := "PASS"
		if !r.Passed {
			status = "FAIL"
		}
		fmt.Printf("  %s  %s\n", status, p.name)
		if !r.Passed {
			fmt.Printf("        %s\n", strings.ReplaceAll(r.Output, "\n", "\n        "))
		}
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"lease": l.ID, "runtime": runtime, "kernel": kernel, "checks": results, "failed": failed})
		if failed > 0 {
			return 1
		}
		return 0
	}
	if failed > 0 {
		fmt.Printf("%d of %d checks failed\n", failed, len(probes))
		return 1
	}
	fmt.Printf("all %d checks passed\n", len(probes))
	return 0
}

func run(ctx context.Context, c *client.Client, id, script string) (string, int, error) {
	var out bytes.Buffer
	code, err := c.Exec(ctx, id, apitype.ExecRequest{Cmd: []string{"sh", "-c", script}, Timeout: "30s"}, &out, &out)
	return out.String(), code, err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return " " + err.Error()
}
