package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
)

// TestTwoNodesShareRedis runs two nodes on one Redis: node A has no warm sandbox, so a lease
// through A's API takes one of B's, and exec, files and release through A are carried out by B,
// whose gateway serves the sandbox.
func TestTwoNodesShareRedis(t *testing.T) {
	dir := t.TempDir()
	up := startUpstream(t)
	const key = "e2e-shared-api-key"
	// Both APIs serve TLS, as nodes on different hosts must, with a certificate the other node
	// verifies through api.peer_ca_file.
	caFile, certFile, keyFile := apiCert(t, dir)
	apiConf := fmt.Sprintf("  keys: [{tenant: dev, sha256: %s}]\n  tls: {cert_file: %q, key_file: %q}\n  peer_ca_file: %q\n",
		api.HashKey(key), certFile, keyFile, caFile)
	start := func(spec nodeSpec, env ...string) *nodeProc {
		spec.API = apiConf
		cfg, err := spec.write(dir, up)
		if err != nil {
			t.Fatal(err)
		}
		return startNode(t, spec, dir+"/"+spec.Name, cfg, env...)
	}
	a := start(nodeSpec{Name: "e2e-a", Network: "airlock-e2ea", Bridge: "airlock-e2ea", Subnet: "10.218.0.0/24", MinWarm: 0})
	// B uses A's Redis and Vault.
	b := start(nodeSpec{Name: "e2e-b", Network: "airlock-e2eb", Bridge: "airlock-e2eb", Subnet: "10.219.0.0/24", MinWarm: 2},
		"REDIS_URL=unix://"+dir+"/e2e-a/redis/redis.sock", "VAULT_ADDR="+a.client.VaultAddr, "VAULT_TOKEN="+a.client.VaultToken)

	ctx := context.Background()
	if !strings.HasPrefix(a.client.Addr, "https://") {
		t.Fatalf("node A's API is at %s, not over TLS", a.client.Addr)
	}
	tlsClient := tlsClientFor(t, caFile)
	ca := &client.Client{Addr: a.client.Addr, Token: key, HTTP: tlsClient}
	l, err := ca.Lease(ctx, api.LeaseRequest{Template: "default", Allow: []string{"api.example.test=demo"}})
	if err != nil {
		t.Fatalf("lease through A: %v", err)
	}
	if l.Node != "e2e-b" {
		t.Fatalf("lease through A is on %s, want B's warm sandbox", l.Node)
	}
	var out, errb bytes.Buffer
	code, err := ca.Exec(ctx, l.ID, api.ExecRequest{Cmd: []string{"curl", "-sS", "https://api.example.test/whoami"}}, &out, &errb)
	if err != nil || code != 0 || !strings.Contains(out.String(), "whoami ok") {
		t.Fatalf("exec through A on B's sandbox: %d %v %q %q", code, err, out.String(), errb.String())
	}
	if seen := up.seen(); len(seen) == 0 || !strings.HasPrefix(seen[len(seen)-1], "Bearer demo-") {
		t.Fatalf("B's gateway did not inject the credential: %v", seen)
	}
	if _, err := ca.PutFile(ctx, l.ID, "hello.txt", strings.NewReader("from A"), false); err != nil {
		t.Fatalf("upload through A: %v", err)
	}
	var got bytes.Buffer
	if _, err := ca.GetFile(ctx, l.ID, "hello.txt", &got, false); err != nil || got.String() != "from A" {
		t.Fatalf("download through A: %v %q", err, got.String())
	}
	// The attack of a tenant: release at A, claiming the call was already routed, so that A
	// would drop the records while B's container kept running. A ignores the header and
	// routes the call to B, signed, and B releases the lease.
	req, _ := http.NewRequest("DELETE", a.client.Addr+"/v1/leases/"+l.ID, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set(api.RoutedHeader, "e2e-b")
	resp, err := tlsClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("release through A with a forged routing header: %v %v", resp, err)
	}
	resp.Body.Close()
	// The release answers before B destroys the container; B's records of the lease wait for
	// its end.
	b.trailUntil(t, l.ID, func(recs []audit.Record) bool { return hasAll(events(recs), "lease/release") })
	if out, err := docker("inspect", l.Sandbox); err == nil {
		t.Fatalf("B's container survived a release through A: %s", out[:80])
	}
	// B, the owner, did the work: its trail has the exec, the transfers and the release; A's
	// has only the bind.
	onB := events(b.trailUntil(t, l.ID, func(recs []audit.Record) bool { return hasAll(events(recs), "lease/release") }))
	onA := events(a.trailUntil(t, l.ID, func(recs []audit.Record) bool { return hasAll(events(recs), "lease/bind") }))
	for _, k := range []string{"exec/", "file/upload", "file/download", "lease/release", "http/"} {
		if !onB[k] {
			t.Errorf("B's trail lacks %s (has %v)", k, onB)
		}
		if k != "http/" && onA[k] {
			t.Errorf("A did %s itself instead of routing it to B", k)
		}
	}
	if !onA["lease/bind"] {
		t.Errorf("A's trail lacks the bind it made (has %v)", onA)
	}
}
