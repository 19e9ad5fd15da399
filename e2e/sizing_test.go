package e2e

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestPoolSizesToABurst sends a burst of three leases at once at a pool of floor 0 on the real
// engine: none is refused, each waits for a sandbox made for it, and the pool's target rises
// by the three that waited, so it keeps three warm afterwards and the same burst again is
// served warm at once.
func TestPoolSizesToABurst(t *testing.T) {
	n := sharedNode(t)
	burst := func() []leaseJSON {
		t.Helper()
		out := make([]leaseJSON, 3)
		errs := make([]string, 3)
		var wg sync.WaitGroup
		for i := range out {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, e, code := n.cli(t, "lease", "--json", "--template", "burst")
				if code != 0 || json.Unmarshal([]byte(o), &out[i]) != nil {
					errs[i] = fmt.Sprintf("exit %d: %s %s", code, o, e)
				}
			}()
		}
		wg.Wait()
		for i, e := range errs {
			if e != "" {
				t.Fatalf("lease %d of the burst: %s", i, e)
			}
		}
		return out
	}
	release := func(ls []leaseJSON) {
		for _, l := range ls {
			if _, errs, code := n.cli(t, "release", l.ID); code != 0 {
				t.Fatalf("release %s: %s", l.ID, errs)
			}
		}
	}
	if p, _, out := n.settled(t, "burst"); p.Warm != 0 || p.Target != 0 {
		t.Fatalf("a pool of floor 0 holds sandboxes before any lease:\n%s", out)
	}
	first := burst()
	for _, l := range first {
		if l.Start != "waited" && l.Start != "cold" {
			t.Errorf("lease %s on an empty pool started %q", l.ID, l.Start)
		}
	}
	release(first)
	var out string
	if err := waitUntil(2*time.Minute, "the burst pool to hold its grown target of 3 warm sandboxes", func() bool {
		p, ok, all := n.settled(t, "burst")
		out = all
		return ok && p.Target == 3 && p.Warm == 3
	}); err != nil {
		t.Fatalf("%v; airlock pools --json:\n%s", err, out)
	}
	second := burst()
	for _, l := range second {
		if l.Start != "warm" {
			t.Errorf("lease %s of the second burst started %q, not warm", l.ID, l.Start)
		}
	}
	release(second)
}
