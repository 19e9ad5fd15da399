package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// sharedSpec is the node most tests share. Each test takes leases of its own on it, so any one
// runs alone with -run; tests that stop, kill or reconfigure a node start one of their own.
// The shared node also warms the two toolchain templates, and reaches the registries the
// workload installs from (registry_test.go): PyPI's names are sent to a mirror, and an
// operator's profile names the npm registry. A second tenant (otherTenant) has a key, the
// snapcap template a small snapshot cap, and gvisor-memory's pauses keep memory.
var sharedSpec = nodeSpec{Name: "e2e", Network: "airlock-e2e", Bridge: "airlock-e2e", Subnet: "10.214.0.0/24", MinWarm: 2,
	API: "  keys: [{tenant: " + otherTenant + ", sha256: " + sha256Hex(otherTenantKey) + "}]\n",
	Gateway: `    - {host: ` + mirrorHost + `, port: 443, address: "UPSTREAM"}
    - {host: ` + npmHost + `, port: 443, address: "UPSTREAM"}
  mirrors:
    - {host: pypi.org, to: "https://` + mirrorHost + `"}
    - {host: files.pythonhosted.org, to: "https://` + mirrorHost + `"}
`,
	Extra: `profiles:
  - name: npm
    scopes:
      - {host: ` + npmHost + `, ports: [443], methods: [GET, HEAD]}
`,
	Templates: `  - {name: python, image: "airlock/python:latest", min_warm: 1, max_total: 4, memory_mb: 1024, workspace_mb: 512, wait_for: 1m}
  - {name: node, image: "airlock/node:latest", min_warm: 1, max_total: 4, memory_mb: 1024, workspace_mb: 512, wait_for: 1m}
  - {name: gvisor, runtime: runsc, min_warm: 2, max_total: 8, default_ttl: 10m, max_ttl: 1h, wait_for: 1m}
  - {name: gvisor-ptrace, runtime: runsc, platform: ptrace, min_warm: 0, max_total: 2, on_empty: cold}
  - {name: crun, runtime: crun, min_warm: 1, max_total: 4, wait_for: 1m}
  - {name: built, min_warm: 2, max_total: 4, wait_for: 2m, build: {dockerfile: DIR/built/Dockerfile}}
  - {name: devc, min_warm: 1, max_total: 2, wait_for: 2m, devcontainer: DIR/devc/.devcontainer/devcontainer.json}
  - {name: burst, min_warm: 0, max_warm: 3, max_total: 6, wait_for: 1m}
  - {name: snapcap, min_warm: 0, max_total: 2, on_empty: cold, snapshot: {max_mb: 1}}
  - {name: gvisor-memory, runtime: runsc, min_warm: 1, max_total: 4, wait_for: 1m, snapshot: {memory: true}}
`}

// shared is the shared node and the upstream its sandboxes reach.
type shared struct {
	*nodeProc
	up  *upstream
	dir string
}

var (
	sharedOnce sync.Once
	sharedEnv  *shared
	sharedErr  error
)

// sharedNode starts the shared node on first use; TestMain stops it after the last test.
func sharedNode(t *testing.T) *shared {
	t.Helper()
	sharedOnce.Do(func() { sharedEnv, sharedErr = startShared() })
	if sharedErr != nil {
		t.Fatalf("the shared node did not start: %v", sharedErr)
	}
	return sharedEnv
}

func startShared() (*shared, error) {
	dir, err := os.MkdirTemp("", "airlock-e2e-")
	if err != nil {
		return nil, err
	}
	up, err := newUpstream()
	if err != nil {
		return nil, err
	}
	if err := writeTemplateSources(dir); err != nil {
		return nil, err
	}
	cfg, err := sharedSpec.write(dir, up)
	if err != nil {
		up.srv.Close()
		return nil, err
	}
	n, err := launch(sharedSpec, dir+"/state", cfg)
	if err != nil {
		up.srv.Close()
		return nil, err
	}
	return &shared{nodeProc: n, up: up, dir: dir}, nil
}

// stopShared stops the shared node and names what it left behind, or a secret value it wrote
// anywhere during the whole run.
func stopShared(s *shared) []string {
	defer s.up.srv.Close()
	var problems []string
	metrics, err := s.metricsPage()
	if err != nil {
		problems = append(problems, fmt.Sprintf("metrics: %v", err))
	}
	demo, err := s.demoValue()
	if err != nil {
		problems = append(problems, err.Error())
	}
	if err := s.shutdown(); err != nil {
		return append(problems, err.Error())
	}
	problems = append(problems, s.leftovers()...)
	secrets := append([]string{demo, s.client.VaultToken}, s.up.vaultTokens()...)
	problems = append(problems, s.secretsWritten(metrics, secrets...)...)
	problems = append(problems, s.trailIntact()...)
	if len(problems) == 0 {
		os.RemoveAll(s.dir)
	}
	return problems
}

// trailIntact checks the whole run's trail with the node's public key, as a security team would
// after it: every record, the chain, the checkpoints, the indexes.
func (s *shared) trailIntact() []string {
	key, err := os.ReadFile(s.client.AuditKey)
	if err != nil {
		return []string{fmt.Sprintf("the audit key: %v", err)}
	}
	v, err := audit.NewVerifier(string(key))
	if err != nil {
		return []string{err.Error()}
	}
	rep, err := audit.Verify(s.client.Audit, audit.VerifyOptions{Verifier: v})
	if err != nil {
		return []string{fmt.Sprintf("audit verify: %v", err)}
	}
	if !rep.OK() || rep.Checkpoints == 0 || rep.Covered != rep.To {
		return []string{"the shared node's trail does not verify after the run:\n" + rep.String()}
	}
	return nil
}

func TestMain(m *testing.M) {
	for _, need := range []string{airlockBin, "../bin/airlock-node", "../bin/vault"} {
		if _, err := os.Stat(need); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s is missing; run the tests with `make test`, which builds it\n", need)
			os.Exit(1)
		}
	}
	for _, img := range []string{"airlock/default:latest", "airlock/python:latest", "airlock/node:latest"} {
		if out, err := exec.Command("docker", "image", "inspect", img).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: the sandbox image %s is missing (`make image`): %s\n", img, bytes.TrimSpace(out))
			os.Exit(1)
		}
	}
	code := m.Run()
	if sharedEnv != nil {
		if problems := stopShared(sharedEnv); len(problems) > 0 {
			fmt.Fprintf(os.Stderr, "e2e: the shared node, after the last test:\n")
			for _, p := range problems {
				fmt.Fprintf(os.Stderr, "  %s\n", p)
			}
			fmt.Fprintf(os.Stderr, "its output:\n%s\n", sharedEnv.log)
			code = 1
		}
	}
	os.Exit(code)
}

// runtimes are the OCI runtimes the invariant tests run under, each by a template of the shared
// node: runc (the default template), crun (crun) and gVisor's runsc (gvisor).
var runtimes = []struct{ name, template string }{{"runc", "default"}, {"crun", "crun"}, {"runsc", "gvisor"}}

// eachRuntime runs body once per runtime, as a subtest named for it, with the shared node's
// leases taken from that runtime's template.
func eachRuntime(t *testing.T, s *shared, body func(t *testing.T, n *shared)) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) { body(t, s.under(rt.template)) })
	}
}

// under is s with leases taken from template.
func (s *shared) under(template string) *shared {
	c, np := *s, *s.nodeProc
	np.template = template
	c.nodeProc = &np
	return &c
}
