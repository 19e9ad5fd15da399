package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/review"
	"github.com/airlock-dev/airlock/slots"
)

func TestDefaultIsValid(t *testing.T) {
	for _, c := range []Config{Default(), DevDefaults()} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
}

// The dev issuer mints any scope for any API key: it is off unless asked for, on only in the
// embedded dev defaults, and never with an API beyond loopback.
func TestDevIssuerOffByDefault(t *testing.T) {
	if Default().Dev.Issuer || Default().Dev.DemoUpstream != "" {
		t.Fatal("the defaults a configuration file is read over have the dev issuer or demo on")
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("node: n\n"), 0o600)
	if c, err := Load(path); err != nil || c.Dev.Issuer {
		t.Fatalf("a file that does not ask for the dev issuer got it: %v %v", c.Dev.Issuer, err)
	}
	if c, err := Load(""); err != nil || !c.Dev.Issuer {
		t.Fatalf("the embedded dev defaults: issuer %v, %v", c.Dev.Issuer, err)
	}
	os.WriteFile(path, []byte("dev: {issuer: true}\napi:\n  listen: 0.0.0.0:7070\n  tls: {cert_file: /c, key_file: /k}\n"), 0o600)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "dev.issuer") {
		t.Fatalf("dev issuer with the API beyond loopback: %v", err)
	}
}

func TestLoadNamesTheField(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"memory", "templates:\n  - name: big\n    memory_mb: 0\n", "templates[0].memory_mb: must be >= 16"},
		{"root user", "templates:\n  - name: r\n    user: \"0:0\"\n", "templates[0].user"},
		{"root user, zero-padded", "templates:\n  - name: r\n    user: \"00:00\"\n", "templates[0].user"},
		{"root user by name", "templates:\n  - name: r\n    user: root\n", "templates[0].user"},
		{"root group", "templates:\n  - name: r\n    user: \"10001:0\"\n", "templates[0].user"},
		{"no nofile limit", "templates:\n  - name: r\n    nofile: 0\n", "templates[0].nofile"},
		{"unknown on_empty", "templates:\n  - name: r\n    on_empty: later\n", "templates[0].on_empty: \"later\" is not wait, cold or refuse"},
		{"unknown after_wait", "templates:\n  - name: r\n    after_wait: wait\n", "templates[0].after_wait"},
		{"negative max_warm", "templates:\n  - name: r\n    max_warm: -1\n", "templates[0].max_warm"},
		{"refill_parallel past 64", "pool: {refill_parallel: 65}\n", "pool.refill_parallel"},
		{"negative memory budget", "pool: {memory_budget_mb: -1}\n", "pool.memory_budget_mb"},
		{"unknown backend", "backend: podman\n", `backend: "podman" is not docker or kubernetes`},
		{"kubernetes without a namespace", "backend: kubernetes\nkubernetes: {node_name: n, host_addr: 10.0.0.1, pod_cidr: 10.244.0.0/24}\n", "kubernetes.namespace"},
		{"kubernetes host address", "backend: kubernetes\nkubernetes: {namespace: s, node_name: n, host_addr: node1, pod_cidr: 10.244.0.0/24}\n", "kubernetes.host_addr"},
		{"kubernetes pod network", "backend: kubernetes\nkubernetes: {namespace: s, node_name: n, host_addr: 10.0.0.1, pod_cidr: 10.244.0.1/24}\n", "kubernetes.pod_cidr"},
		{"kubernetes netns path", "backend: kubernetes\nkubernetes: {namespace: s, node_name: n, host_addr: 10.0.0.1, pod_cidr: 10.244.0.0/24, firewall_netns: ../x}\n", "kubernetes.firewall_netns"},
		{"kubernetes runtime class for runc", "backend: kubernetes\nkubernetes: {namespace: s, node_name: n, host_addr: 10.0.0.1, pod_cidr: 10.244.0.0/24, runtime_classes: {runc: x}}\n", "kubernetes.runtime_classes"},
		{"platform under runc", "templates:\n  - name: r\n    platform: ptrace\n", "templates[0].platform: is gVisor's, for runtime runsc only"},
		{"platform under crun", "templates:\n  - name: r\n    runtime: crun\n    platform: ptrace\n", "templates[0].platform: is gVisor's, for runtime runsc only"},
		{"unknown runtime", "templates:\n  - name: r\n    runtime: kata\n", `templates[0].runtime: "kata" is not runc, crun or runsc`},
		{"unknown platform", "templates:\n  - name: r\n    runtime: runsc\n    platform: kvmm\n", `templates[0].platform: "kvmm" is not one of systrap, ptrace, kvm`},
		{"api beyond loopback", "api:\n  listen: 0.0.0.0:7070\n", "api.listen"},
		{"unknown field", "gatewy:\n  port: 1\n", "field gatewy not found"},
		{"bad subnet", "network:\n  subnet: 10.0.0.1/24\n", "network.subnet"},
		{"credential kind", "credentials:\n  - name: x\n    source: {kind: nope, path: a}\n", "credentials[0] (x).source.kind"},
		{"proxy env", "templates:\n  - name: e\n    env: {HTTPS_PROXY: x}\n", "templates[0].env.HTTPS_PROXY"},
		{"env name with =", "templates:\n  - name: e\n    env: {\"A=B\": x}\n", "templates[0].env.A=B: is not a variable name"},
		{"ports", "templates:\n  - name: e\n    ports: [0]\n", "templates[0].ports: 0 is not a port"},
		{"build network", "templates:\n  - name: e\n    build_network: host\n", "templates[0].build_network: \"host\" is not none or default"},
		{"build and devcontainer", "templates:\n  - name: e\n    build: {dockerfile: D}\n    devcontainer: d.json\n", "templates[0].build: set build or devcontainer, not both"},
		{"built into a shipped image", "templates:\n  - name: e\n    image: airlock/python:latest\n    build: {dockerfile: D}\n", "templates[0].image: airlock/python:latest is a shipped image"},
		{"pinned address", "gateway:\n  private_upstreams:\n    - {host: a.test, port: 443, address: nowhere}\n", "gateway.private_upstreams[0].address"},
		{"api cert without key", "api:\n  tls: {cert_file: /c.pem}\n", "api.tls"},
		{"api advertised over plain http with tls", "api:\n  tls: {cert_file: /c.pem, key_file: /k.pem}\n  advertise: http://n2:7070\n", "api.advertise"},
		{"issuer without tenants", "tokens:\n  issuers:\n    - {name: i, keys: {k1: /k.pem}}\n", "tokens.issuers[0].tenants"},
		{"unbounded ports", "api:\n  max_ports_per_lease: -1\n", "api.max_ports_per_lease"},
		{"mirror to a path", "gateway:\n  mirrors:\n    - {host: pypi.org, to: \"https://m.example/simple\"}\n", "gateway.mirrors[0]"},
		{"mirror of no host", "gateway:\n  mirrors:\n    - {to: \"https://m.example\"}\n", "gateway.mirrors[0]"},
		{"review beyond loopback in clear", "review:\n  listen: 0.0.0.0:7071\n", "review.listen"},
		{"review on the API's origin", "review:\n  listen: 127.0.0.1:7070\n", "review.listen"},
		{"reviewer reading no tenant", "review:\n  reviewers:\n    - {name: s, sha256: " + strings.Repeat("ab", 32) + "}\n", "review.reviewers[0].tenants"},
		{"reviewer key in clear", "review:\n  reviewers:\n    - {name: s, sha256: hunter2, tenants: [\"*\"]}\n", "review.reviewers[0].sha256"},
		{"reviewer key that is an API key", "api:\n  keys: [{tenant: acme, sha256: " + strings.Repeat("ab", 32) + "}]\nreview:\n  reviewers:\n    - {name: s, sha256: " + strings.Repeat("AB", 32) + ", tenants: [acme]}\n", "review.reviewers[0].sha256"},
		{"review streams one identity can fill", "review:\n  streams: {max: 8, per_identity: 8}\n", "review.streams.per_identity: must be at least 1 and less than max (8)"},
		{"review streams kept for reviewers past max", "review:\n  streams: {max: 8, per_identity: 2, reviewers: 9}\n", "review.streams.reviewers"},
		{"no review streams", "review:\n  streams: {max: 0}\n", "review.streams.max"},
		{"api streams one tenant can fill", "api:\n  streams: {max: 16, per_identity: 16}\n", "api.streams.per_identity"},
		{"api streams kept for reviewers", "api:\n  streams: {reviewers: 4}\n", "api.streams.reviewers: must be 0"},
		{"api calls one tenant can fill", "api:\n  calls: {max: 16, per_identity: 16}\n", "api.calls.per_identity: must be at least 1 and less than max (16)"},
		{"no api calls", "api:\n  calls: {max: 0}\n", "api.calls.max"},
		{"review calls kept for reviewers past max", "review:\n  calls: {max: 8, per_identity: 2, reviewers: 9}\n", "review.calls.reviewers"},
		{"api connections one address can fill", "api:\n  connections: {max: 64, per_address: 64}\n", "api.connections.per_address: must be at least 1 and less than max (64)"},
		{"no api connections per address", "api:\n  connections: {per_address: 0}\n", "api.connections.per_address"},
		{"review connections without a bound", "review:\n  connections: {max: 0}\n", "review.connections.max"},
		{"api body without a timeout", "api:\n  timeouts: {body: 0s}\n", "api.timeouts.body: must be between 1s and 1h0m0s"},
		{"api headers past 5 minutes", "api:\n  timeouts: {header: 6m}\n", "api.timeouts.header"},
		{"review stall without a timeout", "review:\n  timeouts: {stall: 0s}\n", "review.timeouts.stall"},
		{"review idle past an hour", "review:\n  timeouts: {idle: 2h}\n", "review.timeouts.idle"},
		{"reviewer posing as a tenant", "review:\n  reviewers:\n    - {name: \"tenant:acme\", sha256: " + strings.Repeat("ab", 32) + ", tenants: [acme]}\n", "review.reviewers[0].name"},
		{"profile without a name", "profiles:\n  - scopes: [{host: a.example}]\n", "profiles[0].name"},
		{"profile with a bad scope", "profiles:\n  - {name: x, scopes: [{host: \"1.2.3.4\"}]}\n", "profiles[0].scopes"},
		{"transparent port on the gateway's", "gateway:\n  transparent_port: 3128\n", "gateway.transparent_port"},
		{"cache no lease can write", "templates:\n  - name: p\n    caches: [{name: pip, path: /var/cache/pip, max_mb: 8}]\n", "templates[0].caches[0].path: \"/var/cache/pip\" is not under the workdir"},
		{"cache without a cap", "templates:\n  - name: p\n    caches: [{name: pip, path: ~/.cache/pip}]\n", "templates[0].caches[0].max_mb: must be > 0"},
		{"cache over its tmpfs", "templates:\n  - name: p\n    caches: [{name: pip, path: /tmp/pip, max_mb: 65}]\n", "templates[0].caches[0].max_mb: 65 is more than tmp_mb (64)"},
		{"seeded cache a tmpfs hides", "templates:\n  - name: p\n    caches: [{name: pip, path: ~/.cache/pip, mode: seeded}]\n", "templates[0].caches[0].path"},
		{"cache name", "templates:\n  - name: p\n    caches: [{name: ../x, path: ~/x, max_mb: 8}]\n", "templates[0].caches[0].name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			os.WriteFile(path, []byte(tt.yaml), 0o600)
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// The review page listens beyond loopback once it serves TLS, with a certificate of its own.
func TestReviewBeyondLoopbackWithTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("review:\n  listen: 0.0.0.0:7071\n  tls: {cert_file: "+cert+", key_file: "+key+"}\n"), 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatalf("review page beyond loopback with TLS: %v", err)
	}
	if c.Loaded.ReviewCertificate == nil || c.Loaded.APICertificate != nil {
		t.Fatalf("certificates read: review %v, API %v", c.Loaded.ReviewCertificate != nil, c.Loaded.APICertificate != nil)
	}
	os.WriteFile(path, []byte("review:\n  listen: 0.0.0.0:7071\n  tls: {cert_file: "+cert+", key_file: "+cert+"}\n"), 0o600)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "review.tls") {
		t.Fatalf("a review certificate with no key: %v", err)
	}
}

// The API listens beyond loopback once it serves TLS.
func TestAPIBeyondLoopbackWithTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("api:\n  listen: 0.0.0.0:7070\n  tls: {cert_file: "+cert+", key_file: "+key+"}\n  advertise: https://n2.internal:7070\n"), 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatalf("API beyond loopback with TLS: %v", err)
	}
	if c.Loaded.APICertificate == nil {
		t.Fatal("the API certificate was not read")
	}
}

// Load reads every file the configuration names, and a file that cannot be read or parsed stops
// it with the field's name.
func TestLoadReadsNamedFiles(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("0123456789abcdef0123\n"), 0o600)
	resolv := filepath.Join(dir, "resolv.conf")
	os.WriteFile(resolv, []byte("# comment\nnameserver 192.0.2.53\nsearch x\n"), 0o644)
	old := HostResolvConf
	HostResolvConf = resolv
	defer func() { HostResolvConf = old }()
	good := fmt.Sprintf("api:\n  node_secret_file: %s\n  peer_ca_file: %s\ngateway:\n  upstream_ca_files: [%s]\nresolver:\n  upstreams: []\n", secret, cert, cert)
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte(good), 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Loaded.NodeSecret) != "0123456789abcdef0123" || len(c.Loaded.PeerCAs) != 1 || len(c.Loaded.UpstreamCAs) != 1 ||
		len(c.Loaded.Resolvers) != 1 || c.Loaded.Resolvers[0] != "192.0.2.53:53" {
		t.Fatalf("loaded %+v", c.Loaded)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"api:\n  node_secret_file: /nonexistent\n", "api.node_secret_file"},
		{"api:\n  peer_ca_file: " + key + "\n", "api.peer_ca_file"},
		{"gateway:\n  upstream_ca_files: [/nonexistent]\n", "gateway.upstream_ca_files[0]"},
		{"tokens:\n  issuers:\n    - {name: i, keys: {k1: " + cert + "}, tenants: [a]}\n", "tokens.issuers[0].keys.k1"},
		{"vault:\n  token_file: /nonexistent\n", "vault.token_file"},
	} {
		os.WriteFile(path, []byte(tt.yaml), 0o600)
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Load(%q) = %v, want an error naming %s", tt.yaml, err, tt.want)
		}
	}
}

// writeCert writes a self-signed certificate and its key.
func writeCert(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(k)
	cert, key = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	return cert, key
}

// A built template may be tagged with the name of another repository that shares a shipped
// image's name (node:20 is not airlock/node); one that would write over airlock's own is refused
// (TestLoadNamesTheField).
func TestBuiltTemplateTaggedLikeAShippedName(t *testing.T) {
	for _, image := range []string{"node:20", "python", "library/default:1", "acme/airlock/node:1"} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(path, []byte("templates:\n  - name: e\n    image: "+image+"\n    build: {dockerfile: D}\n"), 0o600)
		if _, err := Load(path); err != nil && strings.Contains(err.Error(), "shipped image") {
			t.Errorf("image %s: %v", image, err)
		}
	}
	for _, image := range []string{"airlock/node:20", "airlock/python", "airlock/node"} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(path, []byte("templates:\n  - name: e\n    image: "+image+"\n    build: {dockerfile: D}\n"), 0o600)
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "is a shipped image") {
			t.Errorf("image %s: %v, want it refused as a shipped image", image, err)
		}
	}
}

func TestLoadTemplateStartsFromDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("templates:\n  - name: small\n    min_warm: 1\n"), 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Templates) != 1 || c.Templates[0].Name != "small" || c.Templates[0].MinWarm != 1 || c.Templates[0].MemoryMB != 512 {
		t.Fatalf("templates = %+v", c.Templates)
	}
}

// TestTemplateCaches: a template's caches load as written, "~/" kept for the pool to read as
// the workdir, and the mode left empty means tenant.
func TestTemplateCaches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("templates:\n  - name: python\n    image: airlock/python:latest\n    caches:\n"+
		"      - {name: pip, path: ~/.cache/pip, max_mb: 128}\n      - {name: wheels, path: /opt/wheels, mode: seeded}\n"), 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []pool.Cache{{Name: "pip", Path: "~/.cache/pip", MaxMB: 128}, {Name: "wheels", Path: "/opt/wheels", Mode: pool.CacheSeeded}}
	if len(c.Templates) != 1 || !reflect.DeepEqual(c.Templates[0].Caches, want) {
		t.Fatalf("templates = %+v, want python's caches %+v", c.Templates, want)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	if _, err := Load("../configs/airlock.example.yaml"); err != nil {
		t.Fatal(err)
	}
}

// TestExampleConfigNamesEverySetting holds configs/airlock.example.yaml to its promise of every
// setting: each yaml field of Config, at any depth, appears in it, as YAML or in a commented
// example (for list elements the example leaves out).
func TestExampleConfigNamesEverySetting(t *testing.T) {
	b, err := os.ReadFile("../configs/airlock.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	ex := example{text: string(b)}
	for _, path := range ex.missing(reflect.TypeOf(Config{}), []any{doc}, "") {
		t.Errorf("the example config does not show %s", path)
	}
}

type example struct{ text string }

// commented reports whether a comment line of the example shows the key name.
func (e example) commented(name string) bool {
	return regexp.MustCompile(`(?m)^\s*#.*[\s{,]` + regexp.QuoteMeta(name) + `:`).MatchString(e.text)
}

// missing walks the yaml fields of typ and returns the paths that no value in docs (the
// example's values at that place) holds and no comment shows.
func (e example) missing(typ reflect.Type, docs []any, at string) []string {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
		if typ.Kind() == reflect.Map && typ.Elem().Kind() != reflect.Struct {
			return nil
		}
		kind := typ.Kind()
		typ = typ.Elem()
		if kind == reflect.Pointer {
			continue // the value itself is at this place
		}
		var elems []any
		for _, d := range docs {
			switch v := d.(type) {
			case []any:
				elems = append(elems, v...)
			case map[string]any:
				for _, e := range v {
					elems = append(elems, e)
				}
			}
		}
		docs = elems
	}
	if typ.Kind() != reflect.Struct || typ.PkgPath() == "time" {
		return nil
	}
	var missing []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" && f.Anonymous {
			missing = append(missing, e.missing(f.Type, docs, at)...)
			continue
		}
		var inner []any
		for _, d := range docs {
			if m, ok := d.(map[string]any); ok {
				if v, ok := m[name]; ok {
					inner = append(inner, v)
				}
			}
		}
		path := strings.TrimPrefix(at+"."+name, ".")
		if len(inner) == 0 && !e.commented(name) {
			missing = append(missing, path)
			continue
		}
		missing = append(missing, e.missing(f.Type, inner, path)...)
	}
	return missing
}

// A configured profile joins the built-in ones, and one of a built-in's name replaces it.
func TestProfileSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(path, []byte("profiles:\n  - {name: pypi, scopes: [{host: pypi.internal.example, methods: [GET]}]}\n  - {name: npm, scopes: [{host: npm.internal.example}]}\n"), 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := c.ProfileSet()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps["pypi"]) != 1 || ps["pypi"][0].Host != "pypi.internal.example" || len(ps["npm"]) != 1 || len(ps["maven"]) == 0 {
		t.Fatalf("profiles %v", ps)
	}
}

// Only the embedded dev node lets the key that leased answer its own approvals (it has one key).
func TestSelfApprovalOnlyInDev(t *testing.T) {
	if Default().Gateway.Approvals.AllowSelf || !DevDefaults().Gateway.Approvals.AllowSelf {
		t.Fatalf("allow_self: default %v, dev %v", Default().Gateway.Approvals.AllowSelf, DevDefaults().Gateway.Approvals.AllowSelf)
	}
}

// TestDeployComposeLoads: the single-host deployment's configuration loads, and its compose
// file passes Redis and Vault by reference only, mounting that configuration where it runs it.
func TestDeployComposeLoads(t *testing.T) {
	c, err := Load("../deploy/compose/airlock.yaml")
	if err != nil {
		t.Fatalf("deploy/compose/airlock.yaml: %v", err)
	}
	if c.Dev.Issuer || c.Backend != "docker" {
		t.Fatalf("deploy/compose runs the dev issuer (%v) or backend %q", c.Dev.Issuer, c.Backend)
	}
	b, err := os.ReadFile("../deploy/compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			CapAdd      []string          `yaml:"cap_add"`
			PID         string            `yaml:"pid"`
			Privileged  bool              `yaml:"privileged"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	svc, ok := cf.Services["airlock"]
	if !ok || svc.Privileged {
		t.Fatalf("compose service: %+v", cf)
	}
	for _, k := range []string{"REDIS_URL", "VAULT_ADDR"} {
		if v := svc.Environment[k]; !strings.HasPrefix(v, "${"+k) {
			t.Errorf("compose.yaml gives %s a value (%q), not a reference to the environment", k, v)
		}
	}
	// The node wires runc sandboxes into the bridge through their namespaces (pool/docker/wire.go).
	if svc.PID != "host" || !slices.Contains(svc.CapAdd, "SYS_ADMIN") || !slices.Contains(svc.CapAdd, "SYS_PTRACE") || !slices.Contains(svc.CapAdd, "NET_ADMIN") {
		t.Errorf("compose.yaml does not let the node wire its sandboxes (pid %q, cap_add %v)", svc.PID, svc.CapAdd)
	}
	if !slices.Contains(svc.Volumes, "./airlock.yaml:/etc/airlock/airlock.yaml:ro") || !slices.Contains(svc.Command, "/etc/airlock/airlock.yaml") {
		t.Errorf("compose.yaml does not run the configuration it mounts: %v %v", svc.Command, svc.Volumes)
	}
}

// The slot bounds a node starts with are the ones the review page and the API fall back to when
// given none, so a caller that passes no configuration is bounded the same way.
func TestSlotDefaultsMatchTheListeners(t *testing.T) {
	d := Default()
	for _, c := range []struct {
		setting   string
		got, want slots.Limits
	}{
		{"review.streams", d.Review.Streams.Limits(), review.DefaultStreams},
		{"review.calls", d.Review.Calls.Limits(), review.DefaultCalls},
		{"api.streams", d.API.Streams.Limits(), api.DefaultStreams},
		{"api.calls", d.API.Calls.Limits(), api.DefaultCalls},
	} {
		if c.got != c.want {
			t.Errorf("%s %+v; the listener's own default is %+v", c.setting, c.got, c.want)
		}
	}
}
