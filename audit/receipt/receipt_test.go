package receipt

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/airlock-dev/airlock/audit"
)

func key(t *testing.T, node string) (note.Signer, note.Verifier) {
	skey, vkey, err := note.GenerateKey(rand.Reader, audit.KeyName(node))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := note.NewSigner(skey)
	v, _ := note.NewVerifier(vkey)
	return s, v
}

// A receipt answers the seeds' questions from the lease's records alone, is signed with a
// checkpoint that covers it, verifies offline with the public key, and any change to it fails.
func TestReceipt(t *testing.T) {
	signer, verifier := key(t, "n1")
	trail, err := audit.OpenFile(audit.FileConfig{Dir: t.TempDir(), Node: "n1", Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	defer trail.Close()
	ctx := context.Background()
	code := 0
	base := audit.Record{Node: "n1", Tenant: "acme", Lease: "l-1", Task: "t-1", Sandbox: "sb"}
	with := func(r audit.Record) audit.Record {
		r.Node, r.Tenant, r.Lease, r.Task, r.Sandbox = base.Node, base.Tenant, base.Lease, base.Task, base.Sandbox
		return r
	}
	for _, r := range []audit.Record{
		{Kind: audit.KindLease, Event: "bind", Template: "python", Runtime: "runsc", Scopes: []string{"pkg.example:443", "api.example:443"}},
		{Kind: audit.KindDNS, QName: "pkg.example.", Decision: audit.Allow},
		{Kind: audit.KindDNS, QName: "Quiet.Example.", Decision: audit.Allow},
		{Kind: audit.KindHTTP, Method: "GET", Host: "pkg.example", Port: 443, Decision: audit.Allow, Reason: "scope pkg.example:443", BytesDown: 100, Credential: "mirror"},
		{Kind: audit.KindHTTP, Method: "GET", Host: "pkg.example", Port: 443, Decision: audit.Allow, Reason: "scope pkg.example:443", BytesDown: 50},
		{Kind: audit.KindHTTP, Method: "POST", Host: "evil.example", Port: 443, Decision: audit.Deny, Rule: "scope-miss", Reason: "no scope"},
		{Kind: audit.KindDNS, QName: "x.evil.example.", Decision: audit.Deny, Rule: "tunnel", Flagged: true, Reason: "tunnel-shaped"},
		{Kind: audit.KindExec, Command: []string{"pip", "install", "x"}, ExitCode: &code, Stdout: &audit.Stream{Size: 3, SHA256: "ab", Head: "ok\n"}},
		{Kind: audit.KindFile, Event: "workspace-created", Path: "/workspace/out.txt", Size: 2, SHA256: "cd"},
		{Kind: audit.KindFile, Event: "workspace", Path: "/workspace", Reason: "1 created, 0 modified, 0 deleted; 1 files at the end"},
		{Kind: audit.KindLease, Event: "release"},
	} {
		trail.Write(ctx, with(r))
	}
	trail.Write(ctx, audit.Record{Kind: audit.KindHTTP, Tenant: "globex", Lease: "l-1", Host: "other.example"}) // another tenant's
	msg, err := Make(ctx, trail, signer, "acme", "l-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", msg)
	r, err := Open(msg, verifier)
	if err != nil {
		t.Fatal(err)
	}
	if r.Template != "python" || r.Runtime != "runsc" || r.EndedBy != "release" || r.Records.Count != 11 {
		t.Errorf("lease: %+v", r)
	}
	if !reflect.DeepEqual(r.ScopesGranted, []string{"api.example:443", "pkg.example:443"}) || !reflect.DeepEqual(r.ScopesUsed, []string{"pkg.example:443"}) {
		t.Errorf("scopes granted %v used %v", r.ScopesGranted, r.ScopesUsed)
	}
	if len(r.Destinations) != 2 || r.Destinations[1].Host != "pkg.example" || r.Destinations[1].Allowed != 2 || r.Destinations[1].BytesDown != 150 ||
		!reflect.DeepEqual(r.Credentials, []string{"mirror"}) {
		t.Errorf("destinations %+v credentials %v", r.Destinations, r.Credentials)
	}
	if len(r.Denials) != 2 || !reflect.DeepEqual(r.DNSUnused, []string{"quiet.example"}) {
		t.Errorf("denials %+v, dns unused %v", r.Denials, r.DNSUnused)
	}
	if len(r.Commands) != 1 || r.Commands[0].Stdout.Head != "ok\n" || len(r.Files) != 1 || r.Workspace == "" {
		t.Errorf("commands %+v files %+v", r.Commands, r.Files)
	}
	// Offline checks fail for a changed receipt, another key, or another tenant's view.
	forged := bytes.Replace(msg, []byte(`"scopes_used":["pkg.example:443"]`), []byte(`"scopes_used":[]`), 1)
	if _, err := Open(forged, verifier); err == nil {
		t.Error("an edited receipt verified")
	}
	_, other := key(t, "n1")
	if _, err := Open(msg, other); err == nil {
		t.Error("a receipt verified with another key")
	}
	if _, err := Make(ctx, trail, signer, "initech", "l-1"); !errors.Is(err, ErrNoRecords) {
		t.Errorf("another tenant's receipt: %v", err)
	}
}

// A sandbox that asks for more names than a receipt lists makes a receipt of bounded size, and
// says how many were not listed.
func TestReceiptBounded(t *testing.T) {
	b := NewBuilder()
	for i := range MaxListed + 50 {
		b.Add(audit.Record{Seq: uint64(i + 1), Kind: audit.KindDNS, Decision: audit.Deny, Rule: "scope-miss", QName: fmt.Sprintf("n%d.example.", i)})
	}
	r := b.Receipt()
	if len(r.Denials) != MaxListed || r.NotListed["denials"] != 50 || r.Records.Count != MaxListed+50 {
		t.Fatalf("%d denials listed, %v not listed, %d records", len(r.Denials), r.NotListed, r.Records.Count)
	}
}
