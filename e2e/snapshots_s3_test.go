package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/devstack"
)

// TestSnapshotTravelsOverS3: two nodes keep their snapshots in one S3 bucket (a real SeaweedFS
// server, which `make test` builds) and share Redis and Vault (so the tenant's transit key):
// a snapshot taken of a lease on node A seeds a lease on node B, in one of B's own sandboxes.
// With the store down, a snapshot fails saying so, and the lease it was taken of runs on.
func TestSnapshotTravelsOverS3(t *testing.T) {
	dir := t.TempDir()
	up := startUpstream(t)
	weed, err := filepath.Abs("../bin/weed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(weed); err != nil {
		t.Fatalf("%s is missing: `make test` builds it (make seaweedfs)", weed)
	}
	s3, err := devstack.StartS3(context.Background(), filepath.Join(dir, "s3"), weed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s3.Stop)
	access, secret := filepath.Join(dir, "s3-access"), filepath.Join(dir, "s3-secret")
	os.WriteFile(access, []byte(s3.AccessKey), 0o600)
	os.WriteFile(secret, []byte(s3.SecretKey), 0o600)
	extra := fmt.Sprintf("snapshots:\n  store: s3\n  s3: {endpoint: %q, bucket: %q, prefix: e2e/, access_key_file: %q, secret_key_file: %q}\n",
		s3.Endpoint, s3.Bucket, access, secret)
	// Both nodes serve the same tenant, dev (their dev API keys').
	start := func(spec nodeSpec, env ...string) *nodeProc {
		spec.Extra = extra
		cfg, err := spec.write(dir, up)
		if err != nil {
			t.Fatal(err)
		}
		return startNode(t, spec, dir+"/"+spec.Name, cfg, env...)
	}
	a := start(nodeSpec{Name: "e2e-s3a", Network: "airlock-e2es3a", Bridge: "airlock-e2es3a", Subnet: "10.224.0.0/24", MinWarm: 1})
	b := start(nodeSpec{Name: "e2e-s3b", Network: "airlock-e2es3b", Bridge: "airlock-e2es3b", Subnet: "10.225.0.0/24", MinWarm: 1},
		"REDIS_URL=unix://"+dir+"/e2e-s3a/redis/redis.sock", "VAULT_ADDR="+a.client.VaultAddr, "VAULT_TOKEN="+a.client.VaultToken)

	src := a.lease(t)
	if src.Node != "e2e-s3a" {
		t.Fatalf("a lease through A is on %s, want A's own sandbox", src.Node)
	}
	if _, errs, code := a.exec(t, src.ID, "sh", "-c", "mkdir -p /workspace/proj && printf travelled > /workspace/proj/note && chmod 0751 /workspace/proj"); code != 0 {
		t.Fatalf("writing the workspace on A: %s", errs)
	}
	out, errs, code := a.cli(t, "snapshot", src.ID, "--name", "travel", "--json")
	if code != 0 {
		t.Fatalf("airlock snapshot on A: exit %d: %s", code, errs)
	}
	var snap api.SnapshotView
	if err := json.Unmarshal([]byte(out), &snap); err != nil || !strings.HasPrefix(snap.ID, "sha256:") {
		t.Fatalf("airlock snapshot --json printed %q: %v", out, err)
	}

	// B, which never saw the lease, leases from the snapshot by name: in its own sandbox.
	fork := b.leaseWith(t, "--from", "travel")
	if fork.Node != "e2e-s3b" {
		t.Fatalf("the lease from the snapshot through B is on %s, want one of B's sandboxes", fork.Node)
	}
	got, errs, code := b.exec(t, fork.ID, "sh", "-c", "cat /workspace/proj/note; stat -c %a /workspace/proj")
	if code != 0 || got != "travelled751\n" {
		t.Fatalf("the workspace restored on B: exit %d %q %s; want the note and mode 751", code, got, errs)
	}

	// The store goes down: a snapshot fails naming it, and loses nothing of the running lease.
	s3.Stop()
	_, errs, code = a.cli(t, "snapshot", src.ID, "--json")
	if code == 0 || !strings.Contains(errs, "store_down") && !strings.Contains(errs, "unreachable") {
		t.Fatalf("a snapshot with the store down: exit %d %q; want a refusal saying the store is unreachable", code, errs)
	}
	if got, errs, code := a.exec(t, src.ID, "cat", "/workspace/proj/note"); code != 0 || got != "travelled" {
		t.Fatalf("the lease after a failed snapshot: exit %d %q %s", code, got, errs)
	}
}
