package e2e

import (
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// TestFailClosed attacks invariant 3 from inside a sandbox: what no scope allows, what a server
// could read as another path, and a credential that would travel in clear text are refused,
// each with a reason a person can read, and each refusal is recorded under its rule.
func TestFailClosed(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {

		t.Run("a host outside the scopes is refused by gateway and resolver", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			for _, c := range []struct {
				name string
				cmd  []string
				out  func(stdout, stderr string, code int) bool
				want string
			}{
				{"plain HTTP", []string{"curl", "-sS", "http://evil.example/"},
					func(o, _ string, _ int) bool {
						return strings.Contains(o, "denied by rule scope-miss") && strings.Contains(o, "evil.example")
					}, "a body naming rule scope-miss and the host"},
				{"CONNECT", []string{"curl", "-sS", "-v", "https://evil.example/"},
					func(_, e string, code int) bool {
						return code != 0 && strings.Contains(e, "403") && strings.Contains(e, "X-Airlock-Reason: task "+a.Task+" has no scope allowing evil.example:443")
					}, "403 with X-Airlock-Reason naming the task and the target"},
				{"DNS", []string{"dig", "+tries=1", "+time=3", "evil.example"},
					func(o, _ string, _ int) bool {
						return strings.Contains(o, "status: REFUSED") && strings.Contains(o, "Blocked") && strings.Contains(o, "no scope for evil.example")
					}, "REFUSED with EDE Blocked and the reason"},
				// The control: an allowed name resolves through the same resolver.
				{"allowed name", []string{"getent", "hosts", "api.example.test"},
					func(o, _ string, code int) bool { return code == 0 && strings.Contains(o, "api.example.test") }, "the name resolved"},
			} {
				out, errs, code := n.exec(t, a.ID, c.cmd...)
				if !c.out(out, errs, code) {
					t.Errorf("%s: want %s; exit %d, stdout:\n%s\nstderr:\n%s", c.name, c.want, code, out, errs)
				}
			}
		})

		t.Run("ambiguous paths and clear-text credentials are refused and recorded", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			status := func(args ...string) string {
				t.Helper()
				out, _, _ := n.exec(t, a.ID, append([]string{"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...)
				return strings.TrimSpace(out)
			}
			// Control: the plain path is allowed.
			if c := status("https://api.example.test/whoami"); c != "200" {
				t.Fatalf("control: /whoami answered %s, want 200", c)
			}
			// Paths that servers resolve to another path are refused before the credential goes.
			for _, p := range []string{"/x/%2e%2e/whoami", "/x//../whoami", "/x/y/../../whoami"} {
				if c := status("--path-as-is", "https://api.example.test"+p); c != "400" {
					t.Errorf("%s answered %s, want 400", p, c)
				}
			}
			// The credential never goes in clear text.
			if c := status("http://api.example.test/whoami"); c != "403" {
				t.Errorf("plain http with a credential scope answered %s, want 403", c)
			}
			want := []string{"ambiguous-path", "cleartext-credential"}
			rules := func(recs []audit.Record) map[string]bool {
				got := map[string]bool{}
				for _, r := range recs {
					got[r.Rule.String()] = true
				}
				return got
			}
			got := rules(n.trailUntil(t, a.ID, func(recs []audit.Record) bool { return hasAll(rules(recs), want...) }))
			for _, rule := range want {
				if !got[rule] {
					t.Errorf("no audit record under rule %s (have %v)", rule, got)
				}
			}
		})
	})
}
