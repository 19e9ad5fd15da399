package e2e

import (
	"strings"
	"testing"
)

// TestReleaseCutsBeforeItsSandboxGoes: a release answers once the lease is unbound and its
// credentials revoked, before its sandbox is read and destroyed. At the answer, while the
// sandbox still runs (its workspace, 150 MB, takes a while to read), the lease's per-task Vault
// token is refused by Vault and the gateway refuses the sandbox; the receipt, asked for at
// once, waits for the end and carries the workspace's changes, and by then the sandbox is gone.
func TestReleaseCutsBeforeItsSandboxGoes(t *testing.T) {
	n := sharedNode(t)
	l := n.lease(t, "api.example.test=vault-task")
	if out, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
		t.Fatalf("curl before the release: exit %d %q %s", code, out, errs)
	}
	tok := n.up.lastVaultToken(t)
	root := n.vaultClient(t)
	if _, err := root.Auth().Token().Lookup(tok); err != nil {
		t.Fatalf("control: the lease's Vault token is not live before the release: %v", err)
	}
	if _, errs, code := n.exec(t, l.ID, "sh", "-c", "echo made > /workspace/made.txt && head -c 150000000 /dev/zero > /workspace/big.bin"); code != 0 {
		t.Fatalf("filling the workspace: %s", errs)
	}

	if _, errs, code := n.cli(t, "release", l.ID); code != 0 {
		t.Fatalf("release: %s", errs)
	}
	if _, err := root.Auth().Token().Lookup(tok); err == nil {
		t.Error("the lease's Vault token is live after the release answered")
	}
	// From inside the sandbox, as its user with its proxy settings: the gateway knows it no more.
	out, err := docker("exec", l.Sandbox, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "https://api.example.test/whoami")
	if err == nil && strings.TrimSpace(out) == "200" {
		t.Errorf("the released sandbox still reaches the upstream through the gateway: %s", out)
	}
	if running, err := docker("inspect", "-f", "{{.State.Running}}", l.Sandbox); err != nil || strings.TrimSpace(running) != "true" {
		t.Fatalf("the sandbox was gone (%q, %v) before the checks above ended, so this test proves nothing of the order", running, err)
	}

	r := n.receipt(t, l.ID) // waits for the end
	if r.EndedBy != "release" {
		t.Errorf("the receipt says the lease ended by %q", r.EndedBy)
	}
	changes := map[string]string{}
	for _, f := range r.Files {
		changes[f.Path] = f.Event
	}
	if changes["/workspace/made.txt"] != "workspace-created" || changes["/workspace/big.bin"] != "workspace-created" ||
		!strings.Contains(r.Workspace, "files at the end") || strings.Contains(r.Workspace, "could not be read") {
		t.Errorf("the receipt's workspace changes: %v (summary %q)", changes, r.Workspace)
	}
	if out, err := docker("inspect", "-f", "{{.State.Running}}", l.Sandbox); err == nil {
		t.Errorf("the sandbox is still there once the receipt answered: %s", out)
	}
}
