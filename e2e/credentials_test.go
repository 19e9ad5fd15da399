package e2e

import (
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const redacted = "[redacted]"

// unquoteAll undoes JSON's \uXXXX escapes wherever they are in s.
func unquoteAll(s string) string {
	return regexp.MustCompile(`\\u[0-9a-fA-F]{4}`).ReplaceAllStringFunc(s, func(m string) string {
		v, _ := strconv.ParseUint(m[2:], 16, 32)
		return string(rune(v))
	})
}

// TestCredentialsGoWhereTheCatalogSays attacks invariant 5: the gateway injects the credential a
// scope names, never the sandbox's own, scrubs it from what comes back, mints per-task Vault
// tokens that die with the lease, and refuses a token that names a credential for a host the
// catalog does not list.
func TestCredentialsGoWhereTheCatalogSays(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		secret := n.demoSecret(t)

		t.Run("the credential is injected in place of the sandbox's own", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			out, errs, code := n.exec(t, a.ID, "curl", "-sS", "-H", "Authorization: Bearer forged-by-sandbox", "https://api.example.test/whoami")
			if code != 0 || !strings.Contains(out, "whoami ok") {
				t.Fatalf("curl through the gateway: exit %d, out %q, err %q", code, out, errs)
			}
			seen := n.up.seen()
			if len(seen) == 0 || seen[len(seen)-1] != "Bearer "+secret {
				t.Fatalf("upstream saw Authorization %q, want the Vault credential (and never the sandbox's own)", seen)
			}
		})

		t.Run("the injected value is scrubbed from responses", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			out, errs, code := n.exec(t, a.ID, "curl", "-sS", "-D", "-", "https://api.example.test/echo")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if strings.Contains(out, secret) || !strings.Contains(out, "you sent: Bearer [redacted]") || !strings.Contains(strings.ToLower(out), "x-echo: bearer [redacted]") {
				t.Fatalf("response reached the sandbox unscrubbed:\n%s", out)
			}
		})

		t.Run("the injected value comes back neither escaped nor in ranges", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			var got strings.Builder
			for _, as := range []string{"html", "json", "pct"} {
				out, errs, code := n.exec(t, a.ID, "curl", "-sS", "https://api.example.test/reflect?as="+as)
				if code != 0 || !strings.Contains(out, redacted) {
					t.Fatalf("%s: exit %d, %q, %s: want the escaped value redacted", as, code, out, errs)
				}
				got.WriteString(out)
			}
			// Eight bytes at a time, as the sandbox would ask for pieces too short to recognise.
			for off := 0; off < 64; off += 8 {
				out, errs, code := n.exec(t, a.ID, "curl", "-sS", "-w", "\n%{http_code}", "-r", fmt.Sprintf("%d-%d", off, off+7),
					"https://api.example.test/reflect")
				if code != 0 || !strings.HasSuffix(out, "\n200") || !strings.Contains(out, redacted) {
					t.Fatalf("range %d: exit %d, %q, %s: want the whole answer, scrubbed, with 200", off, code, out, errs)
				}
				got.WriteString(out)
			}
			for _, d := range []string{got.String(), html.UnescapeString(got.String()), unquoteAll(got.String())} {
				if u, err := url.PathUnescape(d); err == nil {
					d += u
				}
				if strings.Contains(d, secret) {
					t.Fatalf("the sandbox can read the credential from what it got:\n%s", got.String())
				}
			}
		})

		t.Run("a per-task Vault token is minted on first use and revoked at release", func(t *testing.T) {
			l := n.lease(t, "api.example.test=vault-task")
			if _, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 {
				t.Fatalf("curl: %s", errs)
			}
			tok := n.up.lastVaultToken(t)
			root := n.vaultClient(t)
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

		t.Run("near a lease's end its Vault token is minted once, not per request, and revoked", func(t *testing.T) {
			l := n.lease(t, "api.example.test=vault-task")
			if _, errs, code := n.cli(t, "renew", l.ID, "--ttl", "4s"); code != 0 {
				t.Fatalf("renew: %s", errs)
			}
			before := len(n.up.vaultTokens())
			if _, errs, code := n.exec(t, l.ID, "sh", "-c", "for i in 1 2 3; do curl -sS -o /dev/null https://api.example.test/whoami || exit 1; done"); code != 0 {
				t.Fatalf("three requests: %s", errs)
			}
			toks := n.up.vaultTokens()[before:]
			if len(toks) != 3 || toks[0] != toks[1] || toks[1] != toks[2] {
				t.Fatalf("three requests with seconds left carried %d tokens: %d distinct", len(toks), len(distinct(toks)))
			}
			root := n.vaultClient(t)
			eventually(t, 30*time.Second, "the lease's token to die with it", func() bool {
				_, err := root.Auth().Token().Lookup(toks[0])
				return err != nil
			})
		})

		t.Run("a token from the operator's issuer explains, leases and gets its credential", func(t *testing.T) {
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
			l := n.leaseWith(t, "--token", tok)
			out, errs, code = n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami")
			if code != 0 || !strings.Contains(out, "whoami ok") {
				t.Fatalf("curl under the issuer's token: exit %d %s %s", code, out, errs)
			}
			if seen := n.up.seen(); len(seen) == 0 || seen[len(seen)-1] != "Bearer "+secret {
				t.Fatalf("upstream saw Authorization %q, want the demo credential", seen)
			}
		})

		t.Run("a token naming the credential for a host outside the catalog's list is refused", func(t *testing.T) {
			bad := mintToken(t, "task-bad", []map[string]any{{"host": "evil.example", "credential": "demo"}}, 10*time.Minute)
			if code, errs := n.leaseRefused(t, "--token", bad); code == 0 || !strings.Contains(errs, "may not be sent to evil.example") {
				t.Fatalf("lease with a widened credential: exit %d %s", code, errs)
			}
		})
	})
}

func distinct(vs []string) map[string]bool {
	out := map[string]bool{}
	for _, v := range vs {
		out[v] = true
	}
	return out
}
