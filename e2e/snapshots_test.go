package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/receipt"
)

// workspaceScript fills /workspace with what a snapshot must carry whole: modes 0600, 0755,
// 0444 and a 0700 folder, nested folders, a relative and an absolute symlink, a hard link, an
// empty file, a name with spaces and non-ASCII letters, and set times on each (a link's own).
// $1 is a marker of the test's own.
const workspaceScript = `set -e
cd /workspace
mkdir -p dir/sub/deeper locked
printf %s "$1" > marker
printf private > private && chmod 600 private
printf '#!/bin/sh\necho ran\n' > run.sh && chmod 755 run.sh
printf read-only > readonly && chmod 444 readonly
printf deep > dir/sub/deeper/file
ln dir/sub/deeper/file hard
ln -s dir/sub link
ln -s /workspace/dir/sub/deeper/file abslink
: > empty
printf named > 'a file ✓ é.txt'
chmod 700 locked
touch -d '2001-02-03 04:05:06.123456789' marker private run.sh readonly dir/sub/deeper/file empty 'a file ✓ é.txt'
touch -h -d '2002-03-04 05:06:07.5' link abslink
touch -d '1999-12-31 23:59:59' dir/sub/deeper dir/sub dir locked .
`

// listingScript prints every entry of the workspace with its type, mode, owner, size, time (a
// link's own), link target and link count, sorted: two workspaces with the same listing hold
// the same tree.
const listingScript = `cd /workspace && find . -printf '%p|%y|%m|%U:%G|%s|%T@|%l|%n\n' | LC_ALL=C sort`

// TestSnapshotsAndForks: a snapshot holds the workspace whole (modes, links, times), is
// content-addressed and listed, and seeds any number of leases at once, each its own (id, task,
// sandbox, binding); it is recorded in the trail and the lease's receipt.
func TestSnapshotsAndForks(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		t.Run("a snapshot forks into three leases with the same files, each its own", func(t *testing.T) {
			ctx := context.Background()
			c := n.goClient()
			src := n.lease(t, "api.example.test")
			marker := randomHex(8)
			if _, errs, code := n.exec(t, src.ID, "sh", "-c", workspaceScript, "sh", marker); code != 0 {
				t.Fatalf("filling the workspace: exit %d: %s", code, errs)
			}
			want, errs, code := n.exec(t, src.ID, "sh", "-c", listingScript)
			if code != 0 || !strings.Contains(want, "./hard|f|") || !strings.Contains(want, "|981173106.123456789") {
				t.Fatalf("the workspace's listing: exit %d %s\n%s", code, errs, want)
			}

			name := "forks-" + n.template + "-" + marker
			out, errs, code := n.cli(t, "snapshot", src.ID, "--name", name, "--json")
			var snap apitype.SnapshotView
			if code != 0 || json.Unmarshal([]byte(out), &snap) != nil {
				t.Fatalf("airlock snapshot: exit %d %s %s", code, out, errs)
			}
			t.Cleanup(func() { c.DeleteSnapshot(context.Background(), snap.ID) })
			if !strings.HasPrefix(snap.ID, "sha256:") || snap.Name != name || snap.Template != n.template || snap.Lease != src.ID ||
				snap.Tenant != "dev" || snap.Files < 14 || snap.Stored <= snap.Size || snap.TookMS <= 0 || !strings.HasPrefix(snap.Image, "sha256:") {
				t.Errorf("the snapshot: %+v", snap)
			}
			// Content-addressed: the same workspace again is the same snapshot.
			again, err := c.Snapshot(ctx, src.ID, "", nil)
			if err != nil || again.ID != snap.ID {
				t.Fatalf("a second snapshot of the unchanged workspace: %+v %v, want %s", again, err, snap.ID)
			}
			out, errs, code = n.cli(t, "snapshots", "--json")
			var listed []apitype.SnapshotView
			if code != 0 || json.Unmarshal([]byte(out), &listed) != nil {
				t.Fatalf("airlock snapshots: exit %d %s", code, errs)
			}
			if i := slices.IndexFunc(listed, func(s apitype.SnapshotView) bool { return s.ID == snap.ID }); i < 0 || listed[i].Name != name ||
				slices.ContainsFunc(listed[i+1:], func(s apitype.SnapshotView) bool { return s.ID == snap.ID }) {
				t.Errorf("airlock snapshots lists %s not once by its name:\n%s", snap.ID, out)
			}

			// Three leases from it at once, the first by its name.
			forks := make([]apitype.LeaseView, 3)
			errsAt := make([]error, 3)
			var wg sync.WaitGroup
			for i := range forks {
				ref := snap.ID
				if i == 0 {
					ref = name
				}
				wg.Go(func() {
					forks[i], errsAt[i] = c.Lease(ctx, apitype.LeaseRequest{Template: n.template, Allow: []string{"api.example.test"}, From: ref})
				})
			}
			wg.Wait()
			for i, f := range forks {
				if errsAt[i] == nil {
					t.Cleanup(func() { c.Release(context.Background(), f.ID) })
				}
			}
			for i, f := range forks {
				if errsAt[i] != nil {
					t.Fatalf("lease %d from the snapshot: %v", i, errsAt[i])
				}
				if r := f.Restored; r == nil || r.Snapshot != snap.ID || r.Files != snap.Files || r.Size <= 0 || r.TookMS <= 0 {
					t.Errorf("fork %s does not say what it restored and how long it took: %+v", f.ID, f.Restored)
				}
			}
			seen := map[string]bool{}
			for _, f := range append([]apitype.LeaseView{{ID: src.ID, Task: src.Task, Sandbox: src.Sandbox, Address: src.Address}}, forks...) {
				for _, v := range []string{f.ID, f.Task, f.Sandbox, f.Address} {
					if v == "" || seen[v] {
						t.Errorf("fork %s shares its id, task, sandbox or address (%q) with another lease", f.ID, v)
					}
					seen[v] = true
				}
			}
			for _, f := range forks {
				if got, errs, _ := n.exec(t, f.ID, "sh", "-c", listingScript); got != want {
					t.Errorf("fork %s holds another tree (%s):\n%s\nwant:\n%s", f.ID, errs, got, want)
				}
				if out, _, code := n.exec(t, f.ID, "sh", "-c", "./run.sh && cat link/deeper/file abslink && stat -c %i hard dir/sub/deeper/file | uniq | wc -l"); code != 0 || out != "ran\ndeepdeep1\n" {
					t.Errorf("fork %s: the script, the links and the hard link: exit %d %q", f.ID, code, out)
				}
				if out, errs, code := n.exec(t, f.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
					t.Fatalf("fork %s through the gateway: exit %d %s %s", f.ID, code, out, errs)
				}
			}
			// The same tree restored is the same archive: a snapshot of a fork is the snapshot.
			if again, err := c.Snapshot(ctx, forks[1].ID, "", nil); err != nil || again.ID != snap.ID {
				t.Errorf("a snapshot of fork %s, unchanged: %s %v, want %s", forks[1].ID, again.ID, err, snap.ID)
			}
			// Each fork's request is its own lease's, bound to its own sandbox and task.
			for _, f := range forks {
				recs := n.trailUntil(t, f.ID, func(recs []audit.Record) bool {
					return slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Path == "/whoami" })
				})
				var bound, sent bool
				for _, r := range recs {
					switch {
					case r.Kind == audit.KindLease && r.Event == audit.EventBind:
						bound = strings.Contains(r.Reason, "restored snapshot "+snap.ID) && r.Sandbox == f.Sandbox
					case r.Kind == audit.KindHTTP && r.Path == "/whoami":
						sent = r.Decision == audit.Allow && r.Sandbox == f.Sandbox && r.Task == f.Task && r.Source == f.Address
					}
				}
				if !bound || !sent {
					t.Errorf("fork %s (sandbox %.12s, task %s, address %s): its bind says what it restored %v, its request is its own %v",
						f.ID, f.Sandbox, f.Task, f.Address, bound, sent)
				}
			}

			snapRecord := func(r audit.Record) bool {
				return r.Kind == audit.KindFile && r.Event == "snapshot" && r.SHA256 == snap.ID && r.Decision == audit.Allow && r.Path == "/workspace"
			}
			n.trailUntil(t, src.ID, func(recs []audit.Record) bool {
				return len(slices.DeleteFunc(slices.Clone(recs), func(r audit.Record) bool { return !snapRecord(r) })) == 2
			})
			if _, errs, code := n.cli(t, "release", src.ID); code != 0 {
				t.Fatalf("release: %s", errs)
			}
			r := n.receipt(t, src.ID)
			if !slices.ContainsFunc(r.Files, func(f receipt.File) bool { return f.Event == "snapshot" && f.SHA256 == snap.ID }) {
				t.Errorf("the receipt does not list the snapshot %s: %+v", snap.ID, r.Files)
			}
		})
	})
}

// TestSnapshotRefusals: a tenant sees no other tenant's snapshot, and what cannot be restored
// (a FIFO, a socket) is left out of a snapshot without failing it.
func TestSnapshotRefusals(t *testing.T) {
	n := sharedNode(t)
	ctx := context.Background()
	c := n.goClient()

	t.Run("another tenant's snapshot is no such snapshot", func(t *testing.T) {
		a := n.lease(t, "api.example.test")
		if _, errs, code := n.exec(t, a.ID, "sh", "-c", "echo mine > /workspace/mine"); code != 0 {
			t.Fatal(errs)
		}
		name := "dev-only-" + randomHex(4)
		snap, err := c.Snapshot(ctx, a.ID, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.DeleteSnapshot(context.Background(), snap.ID) })
		other := n.otherClient()
		for _, ref := range []string{snap.ID, name} {
			if _, err := other.SnapshotInfo(ctx, ref); err == nil {
				t.Fatalf("%s shows tenant dev's snapshot %s", otherTenant, ref)
			} else {
				apiError(t, err, 404, "no_such_snapshot")
			}
			_, err := other.Lease(ctx, apitype.LeaseRequest{Allow: []string{"api.example.test"}, From: ref})
			apiError(t, err, 404, "no_such_snapshot")
			apiError(t, other.DeleteSnapshot(ctx, ref), 404, "no_such_snapshot")
		}
		if ss, err := other.Snapshots(ctx); err != nil || slices.ContainsFunc(ss, func(s apitype.SnapshotView) bool { return s.ID == snap.ID }) {
			t.Errorf("%s lists %v (%v)", otherTenant, ss, err)
		}
		if _, err := c.SnapshotInfo(ctx, snap.ID); err != nil {
			t.Errorf("the other tenant's delete touched the snapshot: %v", err)
		}
	})

	t.Run("a FIFO and a socket in the workspace are left out of a snapshot", func(t *testing.T) {
		a := n.lease(t, "api.example.test")
		script := `cd /workspace && mkfifo fifo && echo kept > kept && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")' && ls -l`
		if out, errs, code := n.exec(t, a.ID, "sh", "-c", script); code != 0 || !strings.Contains(out, "prw") || !strings.Contains(out, "srw") {
			t.Fatalf("making a FIFO and a socket: exit %d %s %s", code, out, errs)
		}
		snap, err := c.Snapshot(ctx, a.ID, "", nil)
		if err != nil {
			t.Fatalf("a snapshot of a workspace with a FIFO and a socket: %v", err)
		}
		t.Cleanup(func() { c.DeleteSnapshot(context.Background(), snap.ID) })
		_, archive := openArchive(t, n.catalog(t), "dev", snap.ID)
		if got := tarEntries(t, archive); !slices.Equal(got, []string{"workspace/ 5", "workspace/kept 0"}) || snap.Files != 2 {
			t.Errorf("the snapshot holds %v (%d files), want the folder and the file alone", got, snap.Files)
		}
	})
}

// receipt is lease's signed receipt, verified with the node's key.
func (n *nodeProc) receipt(t *testing.T, lease string) receipt.Receipt {
	t.Helper()
	signed, errs, code := n.cli(t, "receipt", "--signed", lease)
	if code != 0 {
		t.Fatalf("airlock receipt: exit %d %s", code, errs)
	}
	key, err := os.ReadFile(n.client.AuditKey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := audit.NewVerifier(string(key))
	if err != nil {
		t.Fatal(err)
	}
	r, err := receipt.Open([]byte(signed), v)
	if err != nil {
		t.Fatalf("the receipt of %s does not verify: %v\n%s", lease, err, signed)
	}
	return r
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
