package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/devstack"
)

// TestStopAndKillLeaveNothing runs a node of its own: a stop removes everything it made and
// nothing it handled is in what it wrote; a node killed with SIGKILL is cleaned up by the next
// start, and its leases die with it.
func TestStopAndKillLeaveNothing(t *testing.T) {
	spec := nodeSpec{Name: "e2elife", Network: "airlock-e2elife", Bridge: "airlock-e2el", Subnet: "10.216.0.0/24", MinWarm: 2}
	dir := t.TempDir()
	up := startUpstream(t)
	cfg, err := spec.write(dir, up)
	if err != nil {
		t.Fatal(err)
	}
	state := dir + "/state"
	n := startNode(t, spec, state, cfg)

	t.Run("stop removes everything and no secret is in what the node wrote", func(t *testing.T) {
		secret := n.demoSecret(t)
		for _, allow := range []string{"api.example.test=demo", "api.example.test=vault-task"} {
			l := n.lease(t, allow)
			if out, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
				t.Fatalf("curl under %s: exit %d %q %q", allow, code, out, errs)
			}
		}
		metrics := n.metrics(t)
		n.stop(t)
		n.checkClean(t)
		// The values are the demo credential, every per-task Vault token the upstream
		// received, and the dev Vault's root token.
		for _, found := range n.secretsWritten(metrics, append([]string{secret, n.client.VaultToken}, up.vaultTokens()...)...) {
			t.Error(found)
		}
		if !strings.Contains(metrics, "airlock_gateway_requests_total") || !strings.Contains(metrics, "airlock_pool_sandboxes") {
			t.Errorf("metrics lack the gateway or pool series")
		}
		if t.Failed() {
			t.Logf("node output:\n%s", n.log)
		}
	})

	t.Run("restart after kill -9 cleans up", func(t *testing.T) {
		n = startNode(t, spec, state, cfg)
		before := n.managedContainers(t)
		l := n.lease(t, "api.example.test")
		n.kill() // no cleanup runs; redis and vault die with it
		if left := n.managedContainers(t); len(left) == 0 {
			t.Fatal("kill -9 left nothing behind, so this test proves nothing")
		}
		n = startNode(t, spec, state, cfg)
		for _, id := range append(before, l.Sandbox) {
			if out, err := docker("inspect", id); err == nil {
				t.Errorf("container %s from the killed node survived the restart: %s", id[:12], lines(out)[0])
			}
		}
		if _, errs, code := n.exec(t, l.ID, "true"); code == 0 {
			t.Errorf("lease of the killed node still usable: %s", errs)
		}
		n.stop(t)
		n.checkClean(t)
	})
}

// TestBadConfigStopsStartup checks that a wrong field, or a template whose runtime the engine
// lacks, stops `airlock up` with its name and what to do, before anything is started.
func TestBadConfigStopsStartup(t *testing.T) {
	// The engine registers systrap and ptrace (`make runsc`), not kvm: a template on gVisor's
	// kvm platform needs an engine runtime runsc-kvm this one lacks.
	if out, _ := docker("info", "--format", "{{range $k, $v := .Runtimes}}{{$k}} {{end}}"); strings.Contains(" "+out+" ", " runsc-kvm ") {
		t.Fatalf("this engine registers runsc-kvm, so the missing-runtime case needs another platform: %s", out)
	}
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"a field out of range", "templates:\n  - name: big\n    memory_mb: 0\n", []string{"templates[0].memory_mb: must be >= 16"}},
		{"a runtime the engine lacks", "templates:\n  - name: kv\n    runtime: runsc\n    platform: kvm\n", []string{
			"template kv asks for runsc on gVisor's kvm platform (the engine runtime runsc-kvm), which this engine does not have",
			`RUNSC_PLATFORMS="systrap ptrace kvm" make runsc`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := dir + "/bad.yaml"
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(airlockBin, "up", "--config", path)
			cmd.Env = append(os.Environ(), "AIRLOCK_STATE_DIR="+dir+"/state")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("airlock up did not fail: %v\n%s", err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the refusal does not say %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "panic") {
				t.Fatalf("panicked:\n%s", out)
			}
		})
	}
}

// TestKilledNodesMaterialRevokedByTheNext: a node killed with SIGKILL cannot revoke what it
// minted, and its Vault (an external one, which outlives it) keeps it; the node's next run finds
// it in its journal and revokes it, and says so in the trail.
func TestKilledNodesMaterialRevokedByTheNext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	bin, _ := filepath.Abs("../bin/vault")
	v, err := devstack.StartVault(ctx, bin, dir+"/vault")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if err := v.SeedTaskRole(ctx); err != nil {
		t.Fatal(err)
	}
	root, _ := v.Client()
	spec := nodeSpec{Name: "e2evault", Network: "airlock-e2evault", Bridge: "airlock-e2ev", Subnet: "10.220.0.0/24", MinWarm: 1}
	up := startUpstream(t)
	cfg, err := spec.write(dir, up)
	if err != nil {
		t.Fatal(err)
	}
	state := dir + "/state"
	env := []string{"VAULT_ADDR=" + v.Addr, "VAULT_TOKEN=" + v.Token}
	n := startNode(t, spec, state, cfg, env...)
	l := n.lease(t, "api.example.test=vault-task")
	if _, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 {
		t.Fatalf("curl: %s", errs)
	}
	tok := up.lastVaultToken(t)
	n.kill()
	if _, err := root.Auth().Token().Lookup(tok); err != nil {
		t.Fatalf("control: the killed node's token is not live in Vault: %v", err)
	}
	n = startNode(t, spec, state, cfg, env...)
	eventually(t, 30*time.Second, "the next run to revoke the token the killed one minted", func() bool {
		_, err := root.Auth().Token().Lookup(tok)
		return err != nil
	})
	revoked := func(recs []audit.Record) bool {
		for _, r := range recs {
			if r.Kind == audit.KindLease && r.Event == "revoke" && r.Credential == "vault-task" {
				return true
			}
		}
		return false
	}
	if !revoked(n.trailUntil(t, l.ID, revoked)) {
		t.Error("no revoke record for the killed node's token")
	}
	n.stop(t)
	n.checkClean(t)
}
