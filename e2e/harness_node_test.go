package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/node"
)

// This file is a test node: its configuration, its `airlock up` process, and what it serves besides
// the CLI (metrics) or writes (its output).

// nodeSpec is what one test node owns on the host: its name (container label and firewall
// chain), network, bridge and subnet, none shared with another test node or with a developer's
// `airlock up` on the same machine.
type nodeSpec struct {
	Name, Network, Bridge, Subnet string
	MinWarm                       int
	API                           string // YAML lines added under api:
	Extra                         string // YAML added at the top level
	Gateway                       string // YAML added under gateway:, after one private upstream (UPSTREAM: the upstream's address)
	Templates                     string // YAML list entries added under templates: (DIR: the configuration's folder)
}

// hostIP is the host's address on the node's bridge: the first address of its subnet.
func (s nodeSpec) hostIP() string { return netip.MustParsePrefix(s.Subnet).Addr().Next().String() }

func (s nodeSpec) chain() string { return "AIRLOCK-" + s.Name }

// write writes the node's configuration, the upstream's CA and the issuer's key into dir and
// returns the configuration's path.
func (s nodeSpec) write(dir string, up *upstream) (string, error) {
	certPath := filepath.Join(dir, "upstream.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.srv.Certificate().Raw}), 0o644); err != nil {
		return "", err
	}
	der, err := x509.MarshalPKIXPublicKey(&issuerKey.PublicKey)
	if err != nil {
		return "", err
	}
	keyPath := filepath.Join(dir, "issuer-k1.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return "", err
	}
	apiPort, err := freePort()
	if err != nil {
		return "", err
	}
	e2bPort, err := freePort()
	if err != nil {
		return "", err
	}
	cfg := fmt.Sprintf(`node: %s
deployment: airlock-e2e
api:
  listen: 127.0.0.1:%d
%snetwork:
  name: %s
  bridge: %s
  subnet: %s
gateway:
  port: 3128
  private_upstreams:
    - {host: api.example.test, port: 443, address: %[7]q}
%[12]s  upstream_ca_files: [%[8]q]
resolver:
  port: 53
  upstreams: []
dev:
  issuer: true
  demo_upstream: ""
tokens:
  issuers:
    - name: e2e-issuer
      keys: {k1: %[9]q}
      max_ttl: 1h
      tenants: [dev]
e2b:
  listen: 127.0.0.1:%[14]d
templates:
  - name: default
    min_warm: %[10]d
    max_total: 8
    default_ttl: 10m
    max_ttl: 1h
    wait_for: 1m
%[13]s%[11]s`, s.Name, apiPort, s.API, s.Network, s.Bridge, s.Subnet, up.srv.Listener.Addr().String(), certPath, keyPath, s.MinWarm, s.Extra,
		strings.ReplaceAll(s.Gateway, "UPSTREAM", up.srv.Listener.Addr().String()), strings.ReplaceAll(s.Templates, "DIR", dir), e2bPort)
	path := filepath.Join(dir, s.Name+".yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// syncBuffer is a buffer the node's output is copied into while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// nodeProc is a running `airlock up`.
type nodeProc struct {
	spec     nodeSpec
	template string // what lease asks for unless told; "" is the node's default
	cmd      *exec.Cmd
	state    string
	log      *syncBuffer
	client   node.ClientFile
	done     chan struct{}
}

// launch starts `airlock up` with the configuration at cfgPath and state in state, and returns
// once it says it is up.
func launch(spec nodeSpec, state, cfgPath string, env ...string) (*nodeProc, error) {
	n := &nodeProc{spec: spec, state: state, log: &syncBuffer{}, done: make(chan struct{})}
	n.cmd = exec.Command(airlockBin, "up", "--config", cfgPath)
	n.cmd.Env = append(append(os.Environ(), "AIRLOCK_STATE_DIR="+state, "REDIS_URL=", "VAULT_ADDR="), env...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { n.cmd.Wait(); close(n.done) }()
	exited := false
	err := waitUntil(3*time.Minute, "airlock up to say it is up", func() bool {
		select {
		case <-n.done:
			exited = true
			return true
		default:
		}
		return strings.Contains(n.log.String(), "airlock is up")
	})
	switch {
	case exited:
		return nil, fmt.Errorf("airlock up exited early:\n%s", n.log)
	case err != nil:
		n.kill()
		return nil, fmt.Errorf("%v:\n%s", err, n.log)
	}
	if n.client, err = node.ReadClientFile(state); err != nil {
		n.kill()
		return nil, err
	}
	return n, nil
}

// startNode launches a node that is stopped when t ends, if the test has not stopped it.
func startNode(t *testing.T, spec nodeSpec, state, cfgPath string, env ...string) *nodeProc {
	t.Helper()
	n, err := launch(spec, state, cfgPath, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.shutdown(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// shutdown stops the node with SIGINT, as Ctrl-C would, and waits for it to exit; a node that
// has already exited is left alone.
func (n *nodeProc) shutdown() error {
	select {
	case <-n.done:
		return nil
	default:
	}
	n.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-n.done:
		return nil
	case <-time.After(90 * time.Second):
		n.kill()
		return fmt.Errorf("airlock up did not stop within 90s:\n%s", n.log)
	}
}

func (n *nodeProc) stop(t *testing.T) {
	t.Helper()
	if err := n.shutdown(); err != nil {
		t.Fatal(err)
	}
}

// kill stops the node with SIGKILL: nothing of its own cleanup runs.
func (n *nodeProc) kill() {
	syscall.Kill(n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}

// metrics is the node's /metrics page.
func (n *nodeProc) metrics(t *testing.T) string {
	t.Helper()
	m, err := n.metricsPage()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (n *nodeProc) metricsPage() (string, error) {
	resp, err := http.Get(n.client.Addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// secretsWritten names each place, of the node's output, its audit trail and metrics, where one
// of the secret values appears.
func (n *nodeProc) secretsWritten(metrics string, values ...string) []string {
	var trail []byte
	segs, _ := filepath.Glob(filepath.Join(n.client.Audit, "*.jsonl"))
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			return []string{fmt.Sprintf("audit trail unreadable: %v", err)}
		}
		trail = append(trail, b...)
	}
	if len(segs) == 0 {
		return []string{"audit trail: no segments in " + n.client.Audit}
	}
	var found []string
	for _, v := range values {
		if len(v) < 8 {
			continue
		}
		for name, text := range map[string]string{"node output": n.log.String(), "audit trail": string(trail), "metrics": metrics} {
			if strings.Contains(text, v) {
				found = append(found, fmt.Sprintf("a secret value (%.6s...) appears in the %s", v, name))
			}
		}
	}
	return found
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
