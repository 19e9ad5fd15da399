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
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/node"
	"github.com/airlock-dev/airlock/pool"
)

// This file is the harness: the upstream the sandboxes talk to, the test issuer, a node's
// configuration and process, and the CLI. The tests are in one file per invariant.

var airlockBin = func() string { p, _ := filepath.Abs("../bin/airlock"); return p }()

// waitUntil is wait.Until.
var waitUntil = wait.Until

// eventually is wait.For.
var eventually = wait.For

// upstream is the test's own HTTPS server behind the pinned name api.example.test. It records
// the Authorization and X-Vault-Token headers the gateway sent it.
type upstream struct {
	srv        *httptest.Server
	registry   *registry
	mu         sync.Mutex
	auth       []string
	vaultToken []string
}

func newUpstream() (*upstream, error) {
	// One server answers for the API and for the package registries (registry_test.go).
	cert, err := selfSigned("api.example.test", mirrorHost, npmHost)
	if err != nil {
		return nil, err
	}
	u := &upstream{registry: newRegistry()}
	mux := http.NewServeMux()
	u.registry.routes(mux)
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
	// /reflect sends the Authorization header back escaped as ?as= says, one escape per byte
	// (html: &#x..;, json: \u00.., pct: %.. in both cases), or as it is with Range honoured: the
	// gateway must scrub every escape and never let a range of it through.
	mux.HandleFunc("/reflect", func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("Authorization")
		var b strings.Builder
		for i, c := range []byte(v) {
			switch r.URL.Query().Get("as") {
			case "html":
				fmt.Fprintf(&b, "&#x%X;", c)
			case "json":
				fmt.Fprintf(&b, `\u%04x`, c)
			case "pct":
				fmt.Fprintf(&b, [2]string{"%%%02x", "%%%02X"}[i%2], c)
			default:
				b.WriteByte(c)
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader("you sent: "+b.String()+"\n"))
	})
	u.srv = httptest.NewUnstartedServer(mux)
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	u.srv.StartTLS()
	return u, nil
}

// startUpstream is an upstream closed when t ends.
func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u, err := newUpstream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

// vaultTokens is every X-Vault-Token the upstream received, oldest first.
func (u *upstream) vaultTokens() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.vaultToken...)
}

func (u *upstream) lastVaultToken(t *testing.T) string {
	t.Helper()
	toks := u.vaultTokens()
	if len(toks) == 0 {
		t.Fatal("the upstream has received no request")
	}
	return toks[len(toks)-1]
}

// selfRooted is a certificate that is its own root, for the DNS names and IP addresses given.
func selfRooted(cn string, names []string, ips []net.IP) (der []byte, key *ecdsa.PrivateKey, err error) {
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		DNSNames: names, IPAddresses: ips, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	return der, key, err
}

// selfSigned is a certificate for hosts that is its own root, so the test can hand it to the
// gateway as an upstream CA.
func selfSigned(hosts ...string) (tls.Certificate, error) {
	der, key, err := selfRooted(hosts[0], hosts, nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// apiCert writes a certificate for 127.0.0.1 that is its own root, for an API served over TLS,
// and returns the CA, certificate and key files.
func apiCert(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	der, key, err := selfRooted("e2e api", nil, []net.IP{net.ParseIP("127.0.0.1")})
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
var issuerKey = func() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}()

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

// recordAccepts accepts on each listener until it is closed and sends the remote address of
// each connection (a probe that should have been refused) on the channel it returns.
func recordAccepts(ls ...net.Listener) <-chan string {
	accepted := make(chan string, 16)
	for _, l := range ls {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				select {
				case accepted <- c.RemoteAddr().String():
				default:
				}
				c.Close()
			}
		}()
	}
	return accepted
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
	Start   string `json:"start"`
}

// lease leases a sandbox from the dev issuer with the scopes given (`host[=credential]`); it is
// released when t ends.
func (n *nodeProc) lease(t *testing.T, allow ...string) leaseJSON {
	t.Helper()
	var args []string
	for _, a := range allow {
		args = append(args, "--allow", a)
	}
	return n.leaseWith(t, args...)
}

// leaseWith is `airlock lease --json` with the arguments given; the lease is released when t
// ends.
func (n *nodeProc) leaseWith(t *testing.T, args ...string) leaseJSON {
	t.Helper()
	if n.template != "" && !slices.Contains(args, "--template") {
		args = append([]string{"--template", n.template}, args...)
	}
	out, errs, code := n.cli(t, append([]string{"lease", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("airlock lease: exit %d: %s", code, errs)
	}
	var l leaseJSON
	if err := json.Unmarshal([]byte(out), &l); err != nil || l.ID == "" {
		t.Fatalf("airlock lease --json printed %q: %v", out, err)
	}
	t.Cleanup(func() { n.cli(t, "release", l.ID) })
	return l
}

// leaseRefused runs `airlock lease --json` with args, which should be refused, and returns
// its exit code and stderr; a lease it did make is released at once.
func (n *nodeProc) leaseRefused(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, errs, code := n.cli(t, append([]string{"lease", "--json"}, args...)...)
	var l leaseJSON
	if code == 0 && json.Unmarshal([]byte(out), &l) == nil && l.ID != "" {
		n.cli(t, "release", l.ID)
	}
	return code, errs
}

func (n *nodeProc) exec(t *testing.T, id string, cmd ...string) (string, string, int) {
	t.Helper()
	return n.cli(t, append([]string{"exec", id, "--timeout", "60s", "--"}, cmd...)...)
}

// trail reads the node's audit trail; a line that fails verification fails the test.
func (n *nodeProc) trail(t *testing.T) []audit.Record {
	t.Helper()
	var out []audit.Record
	if err := audit.ReadDir(n.client.Audit, func(r audit.Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatalf("audit trail: %v", err)
	}
	return out
}

// trailUntil reads the trail until done holds for the records of lease, which the trail's
// writer flushes within milliseconds, and returns them; after 10s it returns what there is.
func (n *nodeProc) trailUntil(t *testing.T, lease string, done func([]audit.Record) bool) []audit.Record {
	t.Helper()
	var recs []audit.Record
	waitUntil(10*time.Second, "the trail to hold the records of "+lease, func() bool {
		recs = recs[:0]
		for _, r := range n.trail(t) {
			if r.Lease == lease {
				recs = append(recs, r)
			}
		}
		return done(recs)
	})
	return recs
}

// logKinds is the kind/event pairs `airlock logs --lease --json` shows for lease, once the trail
// holds want.
func (n *nodeProc) logKinds(t *testing.T, lease string, want ...string) map[string]bool {
	t.Helper()
	n.trailUntil(t, lease, func(recs []audit.Record) bool { return hasAll(events(recs), want...) })
	out, errs, code := n.cli(t, "logs", "--lease", lease, "--json")
	if code != 0 {
		t.Fatalf("airlock logs: exit %d: %s", code, errs)
	}
	kinds := map[string]bool{}
	for _, l := range lines(out) {
		var r audit.Record
		if json.Unmarshal([]byte(l), &r) == nil && r.Lease == lease {
			kinds[string(r.Kind)+"/"+r.Event] = true
		}
	}
	return kinds
}

// events is the kind/event pairs of recs.
func events(recs []audit.Record) map[string]bool {
	got := map[string]bool{}
	for _, r := range recs {
		got[string(r.Kind)+"/"+r.Event] = true
	}
	return got
}

// hasAll says whether got holds every one of want.
func hasAll(got map[string]bool, want ...string) bool {
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return true
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

// managedContainers is every container the node labelled as its own.
func (n *nodeProc) managedContainers(t *testing.T) []string {
	t.Helper()
	out, err := docker("ps", "-aq", "--no-trunc", "--filter", "label=dev.airlock.node="+n.spec.Name)
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return strings.Fields(out)
}

// leftovers names what a stopped node left behind: containers, network, firewall chain, child
// processes.
func (n *nodeProc) leftovers() []string {
	var left []string
	if out, _ := docker("ps", "-aq", "--filter", "label=dev.airlock.node="+n.spec.Name); strings.TrimSpace(out) != "" {
		left = append(left, "containers: "+strings.Join(strings.Fields(out), " "))
	}
	if out, _ := docker("network", "ls", "-q", "--filter", "name="+n.spec.Network); strings.TrimSpace(out) != "" {
		left = append(left, "network "+n.spec.Network)
	}
	for _, table := range []string{"filter", "nat"} {
		if out, _ := exec.Command("iptables", "-t", table, "-S").CombinedOutput(); strings.Contains(string(out), n.spec.chain()) {
			left = append(left, "firewall chain "+n.spec.chain()+" in table "+table)
		}
	}
	if out, _ := exec.Command("pgrep", "-af", n.state).CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		left = append(left, "child processes:\n"+string(out))
	}
	return left
}

// checkClean asserts that the stopped node left nothing behind.
func (n *nodeProc) checkClean(t *testing.T) {
	t.Helper()
	for _, l := range n.leftovers() {
		t.Errorf("left after stop: %s", l)
	}
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

// vault is a client of the node's dev Vault with its root token.
func (n *nodeProc) vault() (*vaultapi.Client, error) {
	cfg := vaultapi.DefaultConfig()
	cfg.Address = n.client.VaultAddr
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	c.SetToken(n.client.VaultToken)
	return c, nil
}

func (n *nodeProc) vaultClient(t *testing.T) *vaultapi.Client {
	t.Helper()
	c, err := n.vault()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// demoValue is the value of the demo credential in the node's Vault.
func (n *nodeProc) demoValue() (string, error) {
	c, err := n.vault()
	if err != nil {
		return "", err
	}
	s, err := c.KVv2("secret").Get(context.Background(), "airlock/demo")
	if err != nil {
		return "", fmt.Errorf("reading the demo secret from the node's Vault: %w", err)
	}
	v, _ := s.Data["token"].(string)
	if len(v) < 16 {
		return "", fmt.Errorf("demo secret %q looks wrong", v)
	}
	return v, nil
}

func (n *nodeProc) demoSecret(t *testing.T) string {
	t.Helper()
	v, err := n.demoValue()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
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

// settled reports whether template's pool on n holds what it aims at (its warm target, at
// least min_warm) with nothing being made, with the pool's status and what `airlock pools
// --json` showed.
func (n *nodeProc) settled(t *testing.T, template string) (pool.PoolStatus, bool, string) {
	t.Helper()
	out, errs, code := n.cli(t, "pools", "--json")
	if code != 0 {
		return pool.PoolStatus{}, false, errs
	}
	var ps []pool.PoolStatus
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		return pool.PoolStatus{}, false, out
	}
	for _, p := range ps {
		if p.Template == template {
			return p, p.Warm >= p.MinWarm && p.Warm == p.Target && p.Creating == 0, out
		}
	}
	return pool.PoolStatus{}, false, out
}
