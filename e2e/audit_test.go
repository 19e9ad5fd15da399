package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// TestEveryDecisionRecorded attacks invariant 4: allow and deny, HTTP and DNS, each with its
// task and lease, in a trail that what a sandbox sends cannot break, read back by `airlock logs`.
func TestEveryDecisionRecorded(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		secret := n.demoSecret(t)

		t.Run("every decision is one audit record", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			for _, cmd := range [][]string{
				{"curl", "-sS", "https://api.example.test/whoami"},
				{"curl", "-sS", "http://evil.example/"},
				{"dig", "+tries=1", "+time=3", "evil.example"},
				{"getent", "hosts", "api.example.test"},
			} {
				n.exec(t, a.ID, cmd...)
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
			missing := func(recs []audit.Record) []string {
				var names []string
				for name, pred := range checks {
					found := false
					for _, r := range recs {
						if r.Task == a.Task && pred(r) {
							found = true
							break
						}
					}
					if !found {
						names = append(names, name)
					}
				}
				return names
			}
			recs := n.trailUntil(t, a.ID, func(recs []audit.Record) bool { return len(missing(recs)) == 0 })
			for _, name := range missing(recs) {
				t.Errorf("no audit record: %s", name)
			}
			for _, r := range n.trail(t) {
				if strings.Contains(r.Reason, secret) {
					t.Fatalf("secret value in audit record %d", r.Seq)
				}
			}
		})

		t.Run("what a sandbox sends cannot break the trail", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			// A path holding bytes that are not UTF-8, and terminal escapes.
			n.exec(t, a.ID, "curl", "-sS", "-o", "/dev/null", "--path-as-is", "https://api.example.test/%ff%1b%5b2J")
			// A file whose name is not UTF-8.
			if _, errs, c := n.cliStdin(t, strings.NewReader("x"), "cp", "-", a.ID+":bad-\xff-name"); c != 0 {
				t.Errorf("uploading a file with a non-UTF-8 name: %s", errs)
			}
			recs := n.trailUntil(t, a.ID, func(recs []audit.Record) bool { return hasAll(events(recs), "http/", "file/upload") })
			if !hasAll(events(recs), "http/", "file/upload") {
				t.Fatalf("the hostile request and upload were not recorded (have %v)", events(recs))
			}
			out, errs, c := n.cli(t, "logs", "--lease", a.ID)
			if c != 0 || strings.Contains(out, "\x1b[2J") || strings.Contains(errs, "warning") {
				t.Fatalf("airlock logs after hostile bytes: exit %d, %s\n%s", c, errs, out)
			}
			n.trail(t) // fails on any line that does not verify
		})

		t.Run("logs --lease shows each kind; --decision filters", func(t *testing.T) {
			a := n.lease(t, "api.example.test=demo")
			n.exec(t, a.ID, "curl", "-sS", "https://api.example.test/whoami")
			n.exec(t, a.ID, "curl", "-sS", "http://evil.example/")
			n.exec(t, a.ID, "getent", "hosts", "api.example.test") // curl asks the gateway, not the resolver
			if _, errs, c := n.cliStdin(t, strings.NewReader("x"), "cp", "-", a.ID+":note.txt"); c != 0 {
				t.Fatalf("upload: %s", errs)
			}
			want := []string{"lease/bind", "file/upload", "http/", "dns/", "exec/"}
			kinds := n.logKinds(t, a.ID, want...)
			for _, k := range want {
				if !kinds[k] {
					t.Errorf("logs --lease lacks a %s record (have %v)", k, kinds)
				}
			}
			out, _, _ := n.cli(t, "logs", "--lease", a.ID, "--decision", "deny")
			if !strings.Contains(out, "scope-miss") || strings.Contains(out, " allow ") {
				t.Errorf("logs --decision deny:\n%s", out)
			}
			// The same records as OCSF events, one class per kind.
			out, errs, code := n.cli(t, "logs", "--lease", a.ID, "--format", "ocsf")
			classes := map[float64]bool{}
			for _, l := range lines(out) {
				var ev struct {
					ClassUID float64        `json:"class_uid"`
					Unmapped map[string]any `json:"unmapped"`
				}
				if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Unmapped["lease"] != a.ID {
					t.Errorf("logs --format ocsf printed %q (%v)", l, err)
				}
				classes[ev.ClassUID] = true
			}
			for _, c := range []float64{4002, 4003, 1001, 1007, 0} {
				if !classes[c] {
					t.Errorf("logs --format ocsf has no class %v (exit %d, %s): %v", c, code, errs, classes)
				}
			}
		})
	})
}
