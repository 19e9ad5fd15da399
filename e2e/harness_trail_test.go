package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// This file reads a node's audit trail, directly and through `airlock logs`.

// trail reads the node's audit trail; a line that fails verification fails the test.
func (n *nodeProc) trail(t *testing.T) []audit.Record {
	t.Helper()
	var out []audit.Record
	if err := audit.ReadDir(n.client.Audit, func(r audit.Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatalf("audit trail: %v", err)
	}
	return out
}

// trailUntil reads the trail until done holds for the records of lease, which the trail's
// writer flushes within milliseconds, and returns them; after 10s it returns what there is.
func (n *nodeProc) trailUntil(t *testing.T, lease string, done func([]audit.Record) bool) []audit.Record {
	t.Helper()
	var recs []audit.Record
	waitUntil(10*time.Second, "the trail to hold the records of "+lease, func() bool {
		recs = recs[:0]
		for _, r := range n.trail(t) {
			if r.Lease == lease {
				recs = append(recs, r)
			}
		}
		return done(recs)
	})
	return recs
}

// logKinds is the kind/event pairs `airlock logs --lease --json` shows for lease, once the trail
// holds want.
func (n *nodeProc) logKinds(t *testing.T, lease string, want ...string) map[string]bool {
	t.Helper()
	n.trailUntil(t, lease, func(recs []audit.Record) bool { return hasAll(events(recs), want...) })
	out, errs, code := n.cli(t, "logs", "--lease", lease, "--json")
	if code != 0 {
		t.Fatalf("airlock logs: exit %d: %s", code, errs)
	}
	kinds := map[string]bool{}
	for _, l := range lines(out) {
		var r audit.Record
		if json.Unmarshal([]byte(l), &r) == nil && r.Lease == lease {
			kinds[string(r.Kind)+"/"+string(r.Event)] = true
		}
	}
	return kinds
}

// events is the kind/event pairs of recs.
func events(recs []audit.Record) map[string]bool {
	got := map[string]bool{}
	for _, r := range recs {
		got[string(r.Kind)+"/"+string(r.Event)] = true
	}
	return got
}

// hasAll says whether got holds every one of want.
func hasAll(got map[string]bool, want ...string) bool {
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return true
}
