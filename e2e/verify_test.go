package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestVerify: `airlock verify` passes every check of the node, in words and as JSON.
func TestVerify(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
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
	})
}
