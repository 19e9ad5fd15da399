package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/node"
)

// The test node uses its own network, bridge and subnet so it never meets a developer's
// `airlock up` on the same machine.
const (
	testNode   = "e2e"
	testBridge = "airlock-e2e"
	testSubnet = "10.214.0.0/24"
	hostIP     = "10.214.0.1"
)

var airlockBin = func() string { p, _ := filepath.Abs("../bin/airlock"); return p }()

// upstream is the test's own HTTPS server behind the pinned name api.example.test.
type upstream struct {
	srv        *httptest.Server
	mu         sync.Mutex
	auth       []string
	vaultToken []string
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	mux := http.NewServeMux()
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.vaultToken = append(u.vaultToken, r.Header.Get("X-Vault-Token"))
		u.mu.Unlock()
		fmt.Fprintln(w, "upstream: whoami ok")
	})
	// /echo sends the request's Authorization header back: the gateway must scrub it.
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "you sent: %s\n", r.Header.Get("Authorization"))
	})
	u.srv = httptest.NewUnstartedServer(mux)
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "api.example.test")}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

// selfSigned returns a certificate for host that is its own root, so the test can hand it to the
// gateway as an upstream CA.
func selfSigned(t *testing.T, host string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// apiCert writes a certificate for 127.0.0.1 that is its own root, for an API served over TLS,
// and returns the CA, certificate and key files.
func apiCert(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "e2e api"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "api.pem"), filepath.Join(dir, "api-key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	return certFile, certFile, keyFile
}

// tlsClientFor is an HTTP client that trusts the roots in caFile.
func tlsClientFor(t *testing.T, caFile string) *http.Client {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(b)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 2 * time.Minute}
}

// issuerKey signs task tokens the way an agent backend's own issuer would.
var issuerKey *ecdsa.PrivateKey

func issuerKeyPath(t *testing.T, dir string) string {
	t.Helper()
	if issuerKey == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		issuerKey = k
	}
	der, err := x509.MarshalPKIXPublicKey(&issuerKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "issuer-k1.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// mintToken signs a task token with the test issuer's key (ES256, kid k1).
func mintToken(t *testing.T, task string, scopes []map[string]any, ttl time.Duration) string {
	t.Helper()
	now := time.Now()
	claims := jwt.MapClaims{
		"iss": "e2e-issuer", "aud": "airlock-e2e", "sub": task, "jti": fmt.Sprintf("jti-%d", now.UnixNano()),
		"iat": now.Unix(), "exp": now.Add(ttl).Unix(), "scopes": scopes,
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// nodeProc is a running `airlock up`.
type nodeProc struct {
	cmd    *exec.Cmd
	state  string
	log    *bytes.Buffer
	client node.ClientFile
	done   chan struct{}
}

func writeConfig(t *testing.T, dir string, up *upstream) string {
	t.Helper()
	certPath := filepath.Join(dir, "upstream.pem")
	der := up.srv.Certificate().Raw
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	apiPort := freePort(t)
	cfg := fmt.Sprintf(`node: %s
deployment: airlock-e2e
api:
  listen: 127.0.0.1:%d
network:
  name: airlock-e2e
  bridge: %s
  subnet: %s
gateway:
  port: 3128
  private_upstreams:
    - {host: api.example.test, port: 443, address: %q}
  upstream_ca_files: [%q]
resolver:
  port: 53
  upstreams: []
dev:
  issuer: true
  demo_upstream: ""
tokens:
  issuers:
    - name: e2e-issuer
      keys: {k1: %q}
      max_ttl: 1h
      tenants: [dev]
templates:
  - name: default
    min_warm: 2
    max_total: 8
    default_ttl: 10m
    max_ttl: 1h
`, testNode, apiPort, testBridge, testSubnet, up.srv.Listener.Addr().String(), certPath, issuerKeyPath(t, dir))
	path := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startNode(t *testing.T, state, cfgPath string, env ...string) *nodeProc {
	t.Helper()
	n := &nodeProc{state: state, log: &bytes.Buffer{}, done: make(chan struct{})}
	n.cmd = exec.Command(airlockBin, "up", "--config", cfgPath)
	n.cmd.Env = append(append(os.Environ(), "AIRLOCK_STATE_DIR="+state, "REDIS_URL=", "VAULT_ADDR="), env...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.cmd.Wait(); close(n.done) }()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case <-n.done:
			t.Fatalf("airlock up exited early:\n%s", n.log)
		default:
		}
		if strings.Contains(n.log.String(), "airlock is up") {
			break
		}
		if time.Now().After(deadline) {
			n.kill()
			t.Fatalf("airlock up not ready after 3m:\n%s", n.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	f, err := node.ReadClientFile(state)
	if err != nil {
		t.Fatal(err)
	}
	n.client = f
	return n
}

func (n *nodeProc) stop(t *testing.T) {
	t.Helper()
	n.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-n.done:
	case <-time.After(90 * time.Second):
		n.kill()
		t.Fatalf("airlock up did not stop within 90s:\n%s", n.log)
	}
}

func (n *nodeProc) kill() {
	syscall.Kill(n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}

// cli runs the airlock CLI against the node and returns stdout, stderr and the exit code.
func (n *nodeProc) cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return n.cliStdin(t, nil, args...)
}

// cliStdin is cli with stdin.
func (n *nodeProc) cliStdin(t *testing.T, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, args...)
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), "AIRLOCK_STATE_DIR="+n.state, "AIRLOCK_ADDR=", "AIRLOCK_TOKEN=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("airlock %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

type leaseJSON struct {
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	Address string `json:"address"`
	Task    string `json:"task"`
}

func (n *nodeProc) lease(t *testing.T, allow ...string) leaseJSON {
	t.Helper()
	args := []string{"lease", "--json"}
	for _, a := range allow {
		args = append(args, "--allow", a)
	}
	out, errs, code := n.cli(t, args...)
	if code != 0 {
		t.Fatalf("airlock lease: exit %d: %s", code, errs)
	}
	var l leaseJSON
	if err := json.Unmarshal([]byte(out), &l); err != nil || l.ID == "" {
		t.Fatalf("airlock lease --json printed %q: %v", out, err)
	}
	return l
}

func (n *nodeProc) exec(t *testing.T, id string, cmd ...string) (string, string, int) {
	t.Helper()
	return n.cli(t, append([]string{"exec", id, "--timeout", "60s", "--"}, cmd...)...)
}

func (n *nodeProc) auditRecords(t *testing.T) []audit.Record {
	t.Helper()
	time.Sleep(100 * time.Millisecond) // past the trail's flush interval
	var out []audit.Record
	if err := audit.Read(n.client.Audit, func(r audit.Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatalf("audit trail: %v", err)
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func docker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}

// vaultClient talks to the node's dev Vault with its root token.
func vaultClient(t *testing.T, f node.ClientFile) *vaultapi.Client {
	t.Helper()
	cfg := vaultapi.DefaultConfig()
	cfg.Address = f.VaultAddr
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(f.VaultToken)
	return c
}

func vaultSecret(t *testing.T, f node.ClientFile) string {
	t.Helper()
	c := vaultClient(t, f)
	s, err := c.KVv2("secret").Get(context.Background(), "airlock/demo")
	if err != nil {
		t.Fatalf("reading the demo secret from the node's Vault: %v", err)
	}
	v, _ := s.Data["token"].(string)
	if len(v) < 16 {
		t.Fatalf("demo secret %q looks wrong", v)
	}
	return v
}

func managedContainers(t *testing.T) []string {
	t.Helper()
	out, err := docker(t, "ps", "-aq", "--no-trunc", "--filter", "label=dev.airlock.node="+testNode)
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return strings.Fields(out)
}

// checkClean asserts that nothing the node made is left: containers, network, firewall chain,
// child processes.
func checkClean(t *testing.T, state string) {
	t.Helper()
	if cs := managedContainers(t); len(cs) > 0 {
		t.Errorf("containers left after stop: %v", cs)
	}
	if out, _ := docker(t, "network", "ls", "-q", "--filter", "name=airlock-e2e"); strings.TrimSpace(out) != "" {
		t.Errorf("network left after stop: %s", out)
	}
	if out, _ := exec.Command("iptables", "-S").CombinedOutput(); strings.Contains(string(out), "AIRLOCK-"+testNode) {
		t.Errorf("firewall chain left after stop")
	}
	if out, _ := exec.Command("pgrep", "-af", state).CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("child processes left after stop:\n%s", out)
	}
}

func TestMain(m *testing.M) {
	for _, need := range []string{airlockBin, "../bin/vault"} {
		if _, err := os.Stat(need); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s is missing; run the tests with `make test`, which builds it\n", need)
			os.Exit(1)
		}
	}
	if out, err := exec.Command("docker", "image", "inspect", "airlock/default:latest").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the sandbox image is missing (`make image`): %s\n", bytes.TrimSpace(out))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}
