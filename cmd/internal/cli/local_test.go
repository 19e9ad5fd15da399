package cli_test

import (
	"testing"

	"github.com/airlock-dev/airlock/cmd/internal/cli"
	"github.com/airlock-dev/airlock/node"
)

// What the node writes to its state dir for the CLI is what the CLI reads there, field by
// field: the two are declared apart so the client links no node.
func TestClientFileReadsWhatTheNodeWrites(t *testing.T) {
	dir := t.TempDir()
	err := node.WriteClientFile(dir, node.ClientFile{Addr: "https://127.0.0.1:7070", Token: "key", RedisURL: "redis://r:6379/0",
		Ready: node.Ready{Node: "n1", Deployment: "d1", CA: "/s/ca.pem", Audit: "/s/audit", AuditKey: "/s/audit-key.pub"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cli.ReadClientFile(dir)
	want := cli.ClientFile{Addr: "https://127.0.0.1:7070", Token: "key", Node: "n1", Deployment: "d1", CA: "/s/ca.pem",
		Audit: "/s/audit", AuditKey: "/s/audit-key.pub", RedisURL: "redis://r:6379/0"}
	if err != nil || got != want {
		t.Errorf("read %+v, %v; the node wrote %+v", got, err, want)
	}
}
