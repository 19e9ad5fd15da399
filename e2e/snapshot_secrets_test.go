package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
)

// TestNoSecretsInState attacks the promise that state which travels holds no credential: a
// lease that had a credential injected, an answer reflecting it scrubbed and saved, and a
// per-task Vault token minted for it, is snapshotted and paused, and a gVisor lease with the same
// traffic is paused with its memory (a checkpoint: every byte its processes held); no form of
// any credential or of either task token is in any byte the node stored (encrypted as stored,
// or decrypted with the tenant's key), while a marker of the workspace's is in every decrypted
// archive and checkpoint and in no stored byte.
func TestNoSecretsInState(t *testing.T) {
	n := sharedNode(t)
	t.Run("no credential or task token in any byte a snapshot or pause stored, encrypted or not", func(t *testing.T) {
		ctx := context.Background()
		c := n.goClient()
		demo := n.demoSecret(t)
		tok := mintToken(t, "task-state-secrets", []map[string]any{
			{"host": "api.example.test", "paths": []string{"/echo", "/reflect"}, "credential": "demo"},
			{"host": "api.example.test", "paths": []string{"/whoami"}, "credential": "vault-task"},
		}, 10*time.Minute)
		l := n.leaseWith(t, "--token", tok)
		marker := "marker-" + randomHex(12)
		script := `set -e; cd /workspace
curl -sS -o whoami.txt https://api.example.test/whoami
curl -sS -D echo-headers.txt -o echo.txt https://api.example.test/echo
for as in html json pct raw; do curl -sS -o reflect-$as.txt "https://api.example.test/reflect?as=$as"; done
printf %s "$1" > marker
cat whoami.txt echo.txt`
		out, errs, code := n.exec(t, l.ID, "sh", "-c", script, "sh", marker)
		if code != 0 || !strings.Contains(out, "whoami ok") || !strings.Contains(out, "you sent: Bearer [redacted]") {
			t.Fatalf("the traffic: exit %d %s %s", code, out, errs)
		}
		minted := n.up.lastVaultToken(t)
		if info, err := n.vaultClient(t).Auth().Token().Lookup(minted); err != nil {
			t.Fatalf("the per-task Vault token the upstream got is not live: %v", err)
		} else if md, _ := info.TokenMetadata(); md["airlock_lease"] != l.ID {
			t.Fatalf("the last Vault token the upstream got is lease %s's, not this one's", md["airlock_lease"])
		}
		// The same traffic in a gVisor lease whose pause keeps its memory: the checkpoint holds
		// every byte its processes held (the answers curl read among them) and its workspace.
		tokMem := mintToken(t, "task-state-secrets-memory", []map[string]any{
			{"host": "api.example.test", "paths": []string{"/echo", "/reflect"}, "credential": "demo"},
			{"host": "api.example.test", "paths": []string{"/whoami"}, "credential": "vault-task"},
		}, 10*time.Minute)
		lm := n.under("gvisor-memory").leaseWith(t, "--token", tokMem)
		// A process that still holds the answers in its memory when the lease pauses.
		out, errs, code = n.exec(t, lm.ID, "sh", "-c", script+`; setsid sh -c 'held=$(cat whoami.txt echo.txt reflect-*.txt); sleep 3600' </dev/null >/dev/null 2>&1 &`, "sh", marker)
		if code != 0 || !strings.Contains(out, "you sent: Bearer [redacted]") {
			t.Fatalf("the traffic of the gVisor lease: exit %d %s %s", code, out, errs)
		}
		mintedMem := n.up.lastVaultToken(t)
		pm, err := c.Pause(ctx, lm.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		if pm.Kept != apitype.KeptMemory && !strings.Contains(pm.Why, "experimental") {
			t.Fatalf("the pause of the gVisor lease kept %s: %s", pm.Kept, pm.Why)
		}
		t.Cleanup(func() { c.Release(context.Background(), lm.ID) })

		snap, err := c.Snapshot(ctx, l.ID, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.DeleteSnapshot(context.Background(), snap.ID) })
		if _, err := c.Pause(ctx, l.ID, false); err != nil {
			t.Fatal(err)
		}

		values := map[string]string{"the demo credential": demo, "the header it was injected as": "Bearer " + demo,
			"the per-task Vault token": minted, "the task token": tok,
			"the gVisor lease's Vault token": mintedMem, "the gVisor lease's task token": tokMem, "the dev Vault's root token": n.client.VaultToken, "the API key": n.client.Token}
		scan := func(where string, b []byte) {
			for what, v := range values {
				for form, f := range secretForms(v) {
					if bytes.Contains(b, f) {
						t.Errorf("%s (%s) is in %s", what, form, where)
					}
				}
			}
		}

		// Every byte stored, as stored.
		files := 0
		for _, dir := range []string{n.snapshotDir(), filepath.Join(n.state, "snapshots-staging")} {
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				files++
				scan(p, b)
				if bytes.Contains(b, []byte(marker)) {
					t.Errorf("the workspace's marker is in %s as stored: it is not encrypted", p)
				}
				return nil
			})
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		if files < 5 { // a blob (the snapshot and the pause hold one archive) and two manifests; the checkpoint and its manifest
			t.Fatalf("the store holds %d files: it cannot hold the snapshot and the pause", files)
		}

		// Every archive of every tenant, decrypted with the tenant's key.
		cat := n.catalog(t)
		tenants, err := os.ReadDir(filepath.Join(n.snapshotDir(), "tenants"))
		if err != nil {
			t.Fatal(err)
		}
		withMarker := map[string]bool{}
		for _, tenant := range tenants {
			all, err := cat.List(ctx, tenant.Name())
			if err != nil {
				t.Fatalf("listing tenant %s's snapshots: %v", tenant.Name(), err)
			}
			for _, m := range all {
				_, archive := openArchive(t, cat, m.Tenant, m.Ref())
				scan(fmt.Sprintf("tenant %s's %s %s, decrypted", m.Tenant, m.Kind, m.Ref()), archive)
				withMarker[m.Ref()] = bytes.Contains(archive, []byte(marker))
			}
		}
		if !withMarker[snap.ID] || !withMarker["pause:"+l.ID] || !withMarker["pause:"+lm.ID] {
			t.Fatalf("the marker is not in the decrypted snapshot (%v), pause (%v) or checkpoint (%v): the scan proves nothing",
				withMarker[snap.ID], withMarker["pause:"+l.ID], withMarker["pause:"+lm.ID])
		}
	})
}

// secretForms are the forms of v a stored byte could hold it in, as the gateway's scrubber
// knows them (gateway/scrub.go): as it is, hex in either case, escaped for a URL's query and
// path, and base64 in the standard and URL alphabets at each of the three offsets it can start
// at inside a longer text (less the characters the bytes around it change).
func secretForms(v string) map[string][]byte {
	b := []byte(v)
	forms := map[string][]byte{
		"as it is": b, "hex": []byte(hex.EncodeToString(b)), "upper-case hex": []byte(strings.ToUpper(hex.EncodeToString(b))),
		"query-escaped": []byte(url.QueryEscape(v)), "path-escaped": []byte(url.PathEscape(v)),
	}
	for name, enc := range map[string]*base64.Encoding{"base64": base64.StdEncoding, "base64url": base64.URLEncoding} {
		for k := range 3 {
			s := enc.EncodeToString(append(make([]byte, k), b...))
			forms[fmt.Sprintf("%s at offset %d", name, k)] = []byte(s[(8*k+5)/6 : len(s)-4])
		}
	}
	return forms
}
