package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/snapshot"
)

// TestPauseAndResume: a pause keeps a lease's files and releases everything else (its sandbox,
// its binding and the connections through it, every credential minted for it), and says what it
// kept; the paused lease is listed as paused, runs nothing, and is resumed only with a token of
// its own task, in a new sandbox, under credentials minted afresh; or released.
func TestPauseAndResume(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		t.Run("a paused lease holds nothing and resumes with its files under new credentials", func(t *testing.T) {
			ctx := context.Background()
			c := n.goClient()
			root := n.vaultClient(t)
			l := n.lease(t, "api.example.test=vault-task")
			if _, errs, code := n.exec(t, l.ID, "sh", "-c", "mkdir -p /workspace/work && printf kept > /workspace/work/state && chmod 600 /workspace/work/state"); code != 0 {
				t.Fatal(errs)
			}
			if _, err := c.StartProcess(ctx, l.ID, api.ExecRequest{Cmd: []string{"sleep", "3607"}}); err != nil {
				t.Fatal(err)
			}
			if out, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
				t.Fatalf("curl: exit %d %s %s", code, out, errs)
			}
			before := n.up.lastVaultToken(t)
			if _, err := root.Auth().Token().Lookup(before); err != nil {
				t.Fatalf("the lease's Vault token is not live before the pause: %v", err)
			}
			// A download in flight through the gateway when the lease pauses.
			began, ended := n.up.slowBegan.Load(), n.up.slowEnded.Load()
			if _, err := c.StartProcess(ctx, l.ID, api.ExecRequest{Cmd: []string{"curl", "-sS", "-o", "/workspace/slow.out", "https://api.example.test/slow"}}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "the download to reach the upstream", func() bool { return n.up.slowBegan.Load() > began })

			p, err := c.Pause(ctx, l.ID, true)
			if err != nil {
				t.Fatalf("pause: %v", err)
			}
			memory := p.Kept == apitype.KeptMemory
			if p.Lease != l.ID || p.Task != l.Task || !strings.HasPrefix(p.Snapshot, "sha256:") || time.Until(p.Until) < time.Hour ||
				!memory && (p.Kept != apitype.KeptFiles || p.Why == "") {
				t.Errorf("the pause, asked to keep memory: %+v", p)
			}
			// The download ends with the pause (its process ended, its sandbox gone, its binding
			// removed) and its record is written then: it ends no later than the pause's record.
			eventually(t, 10*time.Second, "the upstream to see the download's connection end", func() bool { return n.up.slowEnded.Load() > ended })
			slow := func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Path == "/slow" }
			recs := n.trailUntil(t, l.ID, func(recs []audit.Record) bool {
				return hasAll(events(recs), "lease/pause", "file/snapshot") && slices.ContainsFunc(recs, slow)
			})
			i, j := slices.IndexFunc(recs, slow), slices.IndexFunc(recs, func(r audit.Record) bool { return r.Event == audit.EventPause })
			if i < 0 || j < 0 || recs[i].Time.Add(time.Duration(recs[i].DurationMS*float64(time.Millisecond))).After(recs[j].Time) {
				t.Errorf("the download in flight at the pause has no record that ends with it")
			}
			// Cut by the gateway as the lease was unbound, before its sandbox went: recorded as cut.
			if i >= 0 && recs[i].Event != audit.EventCut {
				t.Errorf("the download in flight at the pause is recorded as %q, not as cut: %+v", recs[i].Event, recs[i])
			}
			// Paused: listed so, no sandbox, nothing runs, nothing minted before is valid.
			out, errs, code := n.cli(t, "leases", "--json")
			var listed []apitype.LeaseView
			if code != 0 || json.Unmarshal([]byte(out), &listed) != nil {
				t.Fatalf("airlock leases: exit %d %s", code, errs)
			}
			if i := slices.IndexFunc(listed, func(v apitype.LeaseView) bool { return v.ID == l.ID }); i < 0 || listed[i].State != "paused" ||
				listed[i].Sandbox != "" || listed[i].Address != "" || listed[i].Pause == nil || listed[i].Pause.Kept != p.Kept {
				t.Errorf("airlock leases does not list %s as paused with no sandbox:\n%s", l.ID, out)
			}
			if !sandboxGone(l.Sandbox) {
				t.Errorf("the paused lease's container %.12s is still there", l.Sandbox)
			}
			if _, errs, code := n.exec(t, l.ID, "true"); code == 0 || !strings.Contains(errs, "404") && !strings.Contains(errs, "409") {
				t.Errorf("exec in a paused lease: exit %d %s", code, errs)
			}
			if _, err := root.Auth().Token().Lookup(before); err == nil {
				t.Error("the Vault token minted before the pause is still live")
			}
			_, err = c.Pause(ctx, l.ID, false)
			apiError(t, err, 409, "lease_state")

			// A token of another task does not resume it; one of its own does.
			other := mintToken(t, "another-task", []map[string]any{{"host": "api.example.test"}}, 10*time.Minute)
			_, err = c.Resume(ctx, l.ID, other, 0)
			apiError(t, err, 403, "token_refused")
			r, status, body := n.resumeAllow(t, l.ID, "api.example.test=vault-task")
			if status != 200 {
				t.Fatalf("resume: %d %s", status, body)
			}
			if r.ID != l.ID || r.Task != l.Task || r.Sandbox == "" || r.Sandbox == l.Sandbox || r.Restored == nil ||
				r.Restored.Snapshot != p.Snapshot || r.Restored.TookMS <= 0 {
				t.Errorf("the resumed lease: %+v (restored %+v)", r, r.Restored)
			}
			out, errs, code = n.exec(t, l.ID, "stat", "-c", "%a %s", "/workspace/work/state")
			if code != 0 || out != "600 4\n" {
				t.Errorf("the files after the resume: exit %d %q %s", code, out, errs)
			}
			procs, _, _ := n.exec(t, l.ID, "sh", "-c", `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done 2>/dev/null | grep -c '^sleep 3607' || true`)
			if want := map[bool]string{false: "0\n", true: "1\n"}[memory]; procs != want {
				t.Errorf("the pause kept %s, and %s sleep 3607 runs after the resume", p.Kept, strings.TrimSpace(procs))
			}
			if out, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
				t.Fatalf("curl after the resume: exit %d %s %s", code, out, errs)
			}
			after := n.up.lastVaultToken(t)
			info, err := root.Auth().Token().Lookup(after)
			if after == before || err != nil {
				t.Fatalf("after the resume the request carried a token minted before it (%v), or a dead one: %v", after == before, err)
			}
			if md, _ := info.TokenMetadata(); md["airlock_lease"] != l.ID {
				t.Errorf("the new token's metadata %v, want lease %s", md, l.ID)
			}
			kinds := n.logKinds(t, l.ID, "lease/pause", "lease/resume")
			if !kinds["lease/pause"] || !kinds["lease/resume"] {
				t.Errorf("logs --lease lacks the pause or the resume: %v", kinds)
			}
		})

		t.Run("a paused lease's release deletes what its pause kept", func(t *testing.T) {
			ctx := context.Background()
			c := n.goClient()
			l := n.lease(t, "api.example.test")
			p, err := c.Pause(ctx, l.ID, false)
			if err != nil || p.Kept != apitype.KeptFiles || p.Why != "" {
				t.Fatalf("pause: %+v %v", p, err)
			}
			if err := c.Release(ctx, l.ID); err != nil {
				t.Fatalf("release of a paused lease: %v", err)
			}
			_, err = c.Get(ctx, l.ID)
			apiError(t, err, 404, "lease_not_found")
			if _, err := n.catalog(t).Get(ctx, "dev", "pause:"+l.ID); !errors.Is(err, snapshot.ErrNoSnapshot) && !errors.Is(err, snapshot.ErrNotFound) {
				t.Errorf("what the pause kept, after the release: %v", err)
			}
			if kinds := n.logKinds(t, l.ID, "lease/release"); !kinds["lease/release"] {
				t.Errorf("logs --lease lacks the release: %v", kinds)
			}
		})
	})
}
