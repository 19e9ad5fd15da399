package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{"api beyond loopback", "api:\n  listen: 0.0.0.0:7070\n", "api.listen"},
		{"unknown field", "gatewy:\n  port: 1\n", "field gatewy not found"},
		{"bad subnet", "network:\n  subnet: 10.0.0.1/24\n", "network.subnet"},
		{"credential kind", "credentials:\n  - name: x\n    source: {kind: nope, path: a}\n", "credentials[0] (x).source.kind"},
		{"proxy env", "templates:\n  - name: e\n    env: {HTTPS_PROXY: x}\n", "templates[0].env.HTTPS_PROXY"},
		{"pinned address", "gateway:\n  private_upstreams:\n    - {host: a.test, port: 443, address: nowhere}\n", "gateway.private_upstreams[0].address"},
		{"api cert without key", "api:\n  tls: {cert_file: /c.pem}\n", "api.tls"},
		{"api advertised over plain http with tls", "api:\n  tls: {cert_file: /c.pem, key_file: /k.pem}\n  advertise: http://n2:7070\n", "api.advertise"},
		{"issuer without tenants", "tokens:\n  issuers:\n    - {name: i, keys: {k1: /k.pem}}\n", "tokens.issuers[0].tenants"},
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

// The API listens beyond loopback once it serves TLS.
func TestAPIBeyondLoopbackWithTLS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("api:\n  listen: 0.0.0.0:7070\n  tls: {cert_file: /c.pem, key_file: /k.pem}\n  advertise: https://n2.internal:7070\n"), 0o600)
	if _, err := Load(path); err != nil {
		t.Fatalf("API beyond loopback with TLS: %v", err)
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

func TestExampleConfigLoads(t *testing.T) {
	if _, err := Load("../configs/airlock.example.yaml"); err != nil {
		t.Fatal(err)
	}
}
