// Package prometheus holds airlock's alerting rules; its test checks them with promtool and
// holds every metric they name to one the code exports.
package prometheus

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// promtool must be installed (scripts/deps.sh installs Debian's prometheus package); a missing
// one fails the test rather than skipping it.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("promtool", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestRulesCheck(t *testing.T) { promtool(t, "check", "rules", "alerts.yml") }

func TestRulesUnitTests(t *testing.T) { promtool(t, "test", "rules", "alerts_test.yml") }

// An alert on a metric no code exports never fires: every airlock_ metric the rules name must be
// one the code registers.
func TestRulesNameExportedMetrics(t *testing.T) {
	rules, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			b, _ := os.ReadFile(p)
			code.Write(b)
		}
		return nil
	})
	for _, m := range regexp.MustCompile(`airlock_[a-z_]+`).FindAllString(string(rules), -1) {
		if !strings.Contains(code.String(), `"`+m+`"`) {
			t.Errorf("the rules use %s, which no code exports", m)
		}
	}
}
