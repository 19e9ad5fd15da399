package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// airlock audit verify --lease chooses the segments it checks by their sealed indexes: with the
// index of a segment holding the lease replaced by another segment's (a valid index, of records
// without the lease), it exits 1 and names that segment's index as tampered with, where trusting
// the file it skipped the segment and said the chain was intact.
func TestAuditVerifyLeaseNamesATamperedIndex(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(t.TempDir(), "audit-key")
	signer, pub, err := audit.LoadSigner(key, "n1")
	if err != nil {
		t.Fatal(err)
	}
	v, err := audit.NewVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	s, err := audit.OpenFile(audit.FileConfig{Dir: dir, Node: "n1", Signer: signer, Verifier: v, SegmentBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		s.Write(context.Background(), audit.Record{Kind: audit.KindHTTP, Tenant: "acme", Lease: fmt.Sprint("l", i/15), Decision: audit.Deny, Host: "a.example"})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	verify := func() (string, int) {
		t.Helper()
		out, errs, code := airlock(t, nil, "audit", "verify", "--dir", dir, "--key", key+".pub", "--lease", "l1")
		t.Logf("exit %d\n%s%s", code, out, errs)
		return out, code
	}
	if out, code := verify(); code != 0 || !strings.Contains(out, "Chain intact") || !strings.Contains(out, "skipped") {
		t.Fatalf("the untouched trail: exit %d", code)
	}

	segs, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	holding := func(lease string) string {
		for _, p := range segs[:len(segs)-1] {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), `"lease":"`+lease+`"`) {
				return p
			}
		}
		t.Fatalf("no sealed segment holds %s", lease)
		return ""
	}
	victim, other := holding("l1"), holding("l3")
	idx := func(p string) string { return strings.TrimSuffix(p, ".jsonl") + ".idx" }
	b, err := os.ReadFile(idx(other))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(idx(victim), b, 0o600)
	out, code := verify()
	if code != 1 || !strings.Contains(out, "INVALID: "+filepath.Base(victim)+": tampered index") || strings.Contains(out, "Chain intact") {
		t.Fatalf("a swapped index: exit %d", code)
	}
}
