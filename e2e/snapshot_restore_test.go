package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/snapshot"
)

// TestRestoreConfined attacks the restore of a lease from a snapshot with snapshots no sandbox's
// tar would make, stored as the node stores them (encrypted for the tenant, in its store) by
// someone who can write the store and use the tenant's key: each entry that could reach past the
// workspace is refused by name and its sandbox destroyed, what the sandbox must not get (setuid
// bits, capabilities, owners) is dropped, and a blob altered, swapped or copied to another
// tenant is not restored.
func TestRestoreConfined(t *testing.T) {
	n := sharedNode(t)
	cat := n.catalog(t)
	c := n.goClient()
	ctx := context.Background()
	dir := func(name string) craftedEntry {
		return craftedEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
	}
	file := func(name, body string) craftedEntry {
		return craftedEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body: body}
	}

	t.Run("an entry that reaches past the workspace refuses the restore by its name, and its sandbox is destroyed", func(t *testing.T) {
		images := map[string]string{}
		for _, tc := range []struct {
			name, template string
			entries        []craftedEntry
			entry          string // the entry the refusal names
		}{
			{"a symlink to / and a file through it", "default", []craftedEntry{dir("workspace/"),
				{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "workspace/root", Linkname: "/", Mode: 0o777}},
				file("workspace/root/tmp/pwned", "x")}, "workspace/root/tmp/pwned"},
			{"a name with ..", "default", []craftedEntry{dir("workspace/"), file("workspace/../tmp/pwned", "x")}, "workspace/../tmp/pwned"},
			{"an absolute name", "default", []craftedEntry{file("/tmp/pwned", "x")}, "/tmp/pwned"},
			{"a hard link to /etc/passwd", "default", []craftedEntry{dir("workspace/"),
				{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/passwd", Linkname: "/etc/passwd"}}}, "workspace/passwd"},
			{"a hard link to etc/passwd", "default", []craftedEntry{dir("workspace/"),
				{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/passwd", Linkname: "etc/passwd"}}}, "workspace/passwd"},
			{"a character device", "default", []craftedEntry{dir("workspace/"),
				{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "workspace/mem", Mode: 0o666, Devmajor: 1, Devminor: 1}}}, "workspace/mem"},
			{"a file over the template's cap", "snapcap", []craftedEntry{dir("workspace/"),
				file("workspace/big", strings.Repeat("x", 2<<20))}, "workspace/big"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if images[tc.template] == "" {
					images[tc.template] = n.imageOf(t, tc.template)
				}
				id := saveCrafted(t, n.nodeProc, cat, "dev", tc.template, images[tc.template], craftTar(t, tc.entries))
				since := time.Now()
				_, err := c.Lease(ctx, apitype.LeaseRequest{Allow: []string{"api.example.test"}, From: id})
				e := apiError(t, err, 422, "snapshot_corrupt")
				if !strings.Contains(e.Message, `"`+tc.entry+`"`) {
					t.Errorf("the refusal does not name the entry %q: %s", tc.entry, e.Message)
				}
				if gone := n.destroyedAfter(t, tc.template, since); len(gone) != 1 {
					t.Errorf("the engine destroyed %d sandboxes of %s during the refused lease, want the one it claimed", len(gone), tc.template)
				}
			})
		}
	})

	eachRuntime(t, n, func(t *testing.T, n *shared) {
		t.Run("setuid bits, capabilities and the archive's owners are dropped", func(t *testing.T) {
			script := "#!/bin/sh\nid -u\n"
			entries := []craftedEntry{dir("workspace/"),
				{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "workspace/suid", Mode: 0o6755, Uid: 0, Gid: 0, Uname: "root", Gname: "root",
					Size: int64(len(script))}, body: script},
				// cap_setuid+ep, as setcap writes it.
				{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "workspace/cap", Mode: 0o755, Size: int64(len(script)),
					PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"}},
					body: script},
				{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "workspace/sticky/", Mode: 0o1777}},
			}
			id := saveCrafted(t, n.nodeProc, cat, "dev", n.template, n.imageOf(t, n.template), craftTar(t, entries))
			l, err := c.Lease(ctx, apitype.LeaseRequest{Allow: []string{"api.example.test"}, From: id})
			if err != nil {
				t.Fatalf("a lease from a snapshot whose files only need their bits dropped: %v", err)
			}
			t.Cleanup(func() { c.Release(context.Background(), l.ID) })
			out, errs, code := n.exec(t, l.ID, "sh", "-c", `stat -c '%n %a %u:%g' suid cap sticky && ./suid && python3 -c 'import os; print(os.listxattr("cap"))'`)
			if want := "suid 755 10001:10001\ncap 755 10001:10001\nsticky 777 10001:10001\n10001\n[]\n"; code != 0 || out != want {
				t.Errorf("restored as:\n%s(exit %d %s)\nwant:\n%s", out, code, errs, want)
			}
		})
	})

	t.Run("a blob altered in the store is refused as corrupt", func(t *testing.T) {
		id := n.snapshotOf(t, "head -c 200000 /dev/urandom > /workspace/noise")
		blob := n.blobPath("dev", id)
		b, err := os.ReadFile(blob)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)*3/4] ^= 0x01
		if err := os.WriteFile(blob, b, 0o600); err != nil {
			t.Fatal(err)
		}
		since := time.Now()
		_, err = c.Lease(ctx, apitype.LeaseRequest{Allow: []string{"api.example.test"}, From: id})
		apiError(t, err, 422, "snapshot_corrupt")
		if gone := n.destroyedAfter(t, "default", since); len(gone) != 1 {
			t.Errorf("the engine destroyed %d sandboxes during the refused lease, want the one it claimed", len(gone))
		}
	})

	t.Run("a blob swapped for another of the tenant's does not verify", func(t *testing.T) {
		// Two archives of one size, each sealed for the tenant under its own key: the swap
		// passes every check of the blob and its key, and only the digest tells them apart.
		a := n.snapshotOf(t, "printf aaaa > /workspace/f && touch -d @1000000000 /workspace/f /workspace")
		b := n.snapshotOf(t, "printf bbbb > /workspace/f && touch -d @1000000000 /workspace/f /workspace")
		ma, err := c.SnapshotInfo(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		mb, err := c.SnapshotInfo(ctx, b)
		if err != nil || mb.Size != ma.Size {
			t.Fatalf("the two archives: %d and %d bytes (%v)", ma.Size, mb.Size, err)
		}
		swapped, err := os.ReadFile(n.blobPath("dev", b))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(n.blobPath("dev", a), swapped, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := c.Lease(ctx, apitype.LeaseRequest{Allow: []string{"api.example.test"}, From: a})
		if err == nil {
			t.Cleanup(func() { c.Release(context.Background(), l.ID) })
			out, _, _ := n.exec(t, l.ID, "cat", "/workspace/f")
			t.Fatalf("a lease from %s restored the archive of %s (f holds %q): the digest was not checked", a, b, out)
		}
		if e := apiError(t, err, 422, "snapshot_corrupt"); !strings.Contains(e.Message, "does not verify") {
			t.Errorf("the refusal does not say the snapshot does not verify: %s", e.Message)
		}
	})

	t.Run("a snapshot copied to another tenant's name cannot be restored by that tenant", func(t *testing.T) {
		id := n.snapshotOf(t, "echo dev-only > /workspace/f")
		hexID := strings.TrimPrefix(id, "sha256:")
		other := filepath.Join(n.snapshotDir(), "tenants", otherTenant)
		for _, d := range []string{"blobs", "manifests"} {
			if err := os.MkdirAll(filepath.Join(other, d), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		blob, err := os.ReadFile(n.blobPath("dev", id))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(n.snapshotDir(), "tenants", "dev", "manifests", hexID+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		m["tenant"] = otherTenant
		edited, _ := json.Marshal(m)
		copies := []string{filepath.Join(other, "blobs", hexID), filepath.Join(other, "manifests", hexID+".json")}
		for i, b := range [][]byte{blob, edited} {
			if err := os.WriteFile(copies[i], b, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(copies[i]) })
		}
		oc := n.otherClient()
		if v, err := oc.SnapshotInfo(ctx, id); err != nil || v.Tenant != otherTenant {
			t.Fatalf("the copy is not %s's to see, so the restore below proves nothing: %+v %v", otherTenant, v, err)
		}
		l, err := oc.Lease(ctx, apitype.LeaseRequest{Allow: []string{"api.example.test"}, From: id})
		if err == nil {
			oc.Release(ctx, l.ID)
			t.Fatalf("%s restored tenant dev's snapshot copied to its name", otherTenant)
		}
		if e := apiError(t, err, 404, "no_such_snapshot"); strings.Contains(e.Message, "tenant dev") {
			t.Errorf("the refusal names the tenant the snapshot belongs to: %s", e.Message)
		}
	})
}

// saveCrafted stores archive as tenant's snapshot of template (image: its image) with cat, as the
// pool would store one but without the pool's check of the archive, and returns its ID; the
// snapshot is deleted when t ends.
func saveCrafted(t *testing.T, n *nodeProc, cat *snapshot.Catalog, tenant, template, image string, archive []byte) string {
	t.Helper()
	m, err := cat.Save(context.Background(), snapshot.Meta{Tenant: tenant, Template: template, Image: image, Paths: []string{"/workspace"}},
		bytes.NewReader(archive))
	if err != nil {
		t.Fatalf("storing the crafted snapshot: %v", err)
	}
	t.Cleanup(func() { n.goClient().DeleteSnapshot(context.Background(), m.ID) })
	return m.ID
}

// imageOf is the image the sandboxes of template run, as a snapshot of one of them records it.
func (n *nodeProc) imageOf(t *testing.T, template string) string {
	t.Helper()
	l := n.leaseWith(t, "--template", template, "--allow", "api.example.test")
	c := n.goClient()
	s, err := c.Snapshot(context.Background(), l.ID, "", nil)
	if err != nil || !strings.HasPrefix(s.Image, "sha256:") {
		t.Fatalf("a snapshot of a %s sandbox, for its image: %+v %v", template, s, err)
	}
	c.DeleteSnapshot(context.Background(), s.ID)
	c.Release(context.Background(), l.ID)
	n.awaitEnd(t, l.ID)
	return s.Image
}

// snapshotOf is the ID of a snapshot of a fresh lease's workspace after script ran in it; the
// snapshot is deleted when t ends.
func (n *nodeProc) snapshotOf(t *testing.T, script string) string {
	t.Helper()
	l := n.lease(t, "api.example.test")
	if _, errs, code := n.exec(t, l.ID, "sh", "-c", script); code != 0 {
		t.Fatalf("%s: exit %d %s", script, code, errs)
	}
	c := n.goClient()
	s, err := c.Snapshot(context.Background(), l.ID, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSnapshot(context.Background(), s.ID) })
	c.Release(context.Background(), l.ID)
	n.awaitEnd(t, l.ID)
	return s.ID
}

// blobPath is the file of tenant's blob of snapshot id in the node's directory store.
func (n *nodeProc) blobPath(tenant, id string) string {
	return filepath.Join(n.snapshotDir(), "tenants", tenant, "blobs", strings.TrimPrefix(id, "sha256:"))
}
