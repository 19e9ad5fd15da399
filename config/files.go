package config

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/pool/devcontainer"
	"github.com/airlock-dev/airlock/token"
)

// Loaded is what the files a configuration names hold, read once by Load, so nothing after it
// reads a file the configuration names (the CA and the audit trail are the node's own state,
// not configuration). Each error names the field whose file was wrong.
type Loaded struct {
	// IssuerKeys are the public keys of tokens.issuers, by issuer name and then kid.
	IssuerKeys map[string]map[string]crypto.PublicKey
	// UpstreamCAs are the certificates of gateway.upstream_ca_files.
	UpstreamCAs []*x509.Certificate
	// APICertificate is api.tls's certificate and key; nil without api.tls.
	APICertificate *tls.Certificate
	// ReviewCertificate is review.tls's certificate and key; nil without review.tls.
	ReviewCertificate *tls.Certificate
	// E2BCertificate is e2b.tls's certificate and key; nil without e2b.tls.
	E2BCertificate *tls.Certificate
	// NodeSecret is api.node_secret_file's secret; nil means the nodes share one through Redis.
	NodeSecret []byte
	// PeerCAs are the certificates of api.peer_ca_file.
	PeerCAs []*x509.Certificate
	// VaultToken is vault.token_file's token, when one is named.
	VaultToken string
	// Resolvers are the resolver's upstreams: resolver.upstreams, else the host's nameservers.
	Resolvers []string
}

// HostResolvConf is where the host's nameservers are read from when resolver.upstreams is empty.
var HostResolvConf = "/etc/resolv.conf"

// Issuers returns the trusted issuers as the token package takes them.
func (c *Config) Issuers() map[string]token.Issuer {
	out := map[string]token.Issuer{}
	for _, iss := range c.Tokens.Issuers {
		out[iss.Name] = token.Issuer{Name: iss.Name, MaxTTL: iss.MaxTTL, Keys: c.Loaded.IssuerKeys[iss.Name], Tenants: iss.Tenants}
	}
	return out
}

// load reads every file the configuration names into c.Loaded.
func (c *Config) load() error {
	var errs []error
	bad := func(field string, err error) { errs = append(errs, fmt.Errorf("%s: %w", field, err)) }
	l := Loaded{IssuerKeys: map[string]map[string]crypto.PublicKey{}}
	for i, iss := range c.Tokens.Issuers {
		keys := map[string]crypto.PublicKey{}
		for kid, path := range iss.Keys {
			b, err := os.ReadFile(path)
			if err == nil {
				var k crypto.PublicKey
				if k, err = token.ParsePublicKeyPEM(b); err == nil {
					keys[kid] = k
					continue
				}
			}
			bad(fmt.Sprintf("tokens.issuers[%d].keys.%s", i, kid), err)
		}
		l.IssuerKeys[iss.Name] = keys
	}
	for i, f := range c.Gateway.UpstreamCAFiles {
		certs, err := readCerts(f)
		if err != nil {
			bad(fmt.Sprintf("gateway.upstream_ca_files[%d]", i), err)
		}
		l.UpstreamCAs = append(l.UpstreamCAs, certs...)
	}
	for _, t := range []struct {
		field string
		cfg   APITLS
		to    **tls.Certificate
	}{{"api.tls", c.API.TLS, &l.APICertificate}, {"review.tls", c.Review.TLS, &l.ReviewCertificate},
		{"e2b.tls", c.E2B.TLS, &l.E2BCertificate}} {
		if !t.cfg.Enabled() {
			continue
		}
		if cert, err := tls.LoadX509KeyPair(t.cfg.CertFile, t.cfg.KeyFile); err != nil {
			bad(t.field, err)
		} else {
			*t.to = &cert
		}
	}
	if f := c.API.NodeSecretFile; f != "" {
		b, err := os.ReadFile(f)
		switch {
		case err != nil:
			bad("api.node_secret_file", err)
		case len(strings.TrimSpace(string(b))) < 16:
			bad("api.node_secret_file", fmt.Errorf("%s holds fewer than 16 bytes", f))
		default:
			l.NodeSecret = []byte(strings.TrimSpace(string(b)))
		}
	}
	if f := c.API.PeerCAFile; f != "" {
		certs, err := readCerts(f)
		if err != nil {
			bad("api.peer_ca_file", err)
		}
		l.PeerCAs = certs
	}
	if f := c.Vault.TokenFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			bad("vault.token_file", err)
		}
		l.VaultToken = strings.TrimSpace(string(b))
	}
	// A devcontainer.json gives its template environment (under what the template sets) and
	// the ports it forwards (unless the template lists its own).
	for i := range c.Templates {
		t := &c.Templates[i]
		if t.Devcontainer == "" {
			continue
		}
		spec, err := devcontainer.Load(t.Devcontainer)
		if err != nil {
			bad(fmt.Sprintf("templates[%d].devcontainer", i), err)
			continue
		}
		for k, v := range spec.Env {
			if _, set := t.Env[k]; !set {
				if t.Env == nil {
					t.Env = map[string]string{}
				}
				t.Env[k] = v
			}
		}
		if len(t.Ports) == 0 {
			t.Ports = spec.Ports
		}
		for _, err := range t.Validate() {
			bad(fmt.Sprintf("templates[%d] (with %s)", i, t.Devcontainer), err)
		}
	}
	l.Resolvers = c.Resolver.Upstreams
	if len(l.Resolvers) == 0 {
		l.Resolvers = hostNameservers(HostResolvConf)
	}
	c.Loaded = l
	return errors.Join(errs...)
}

// readCerts reads the PEM certificates in path.
func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return out, nil
}

// hostNameservers reads the nameservers of the resolv.conf at path ("host:53" each); none when
// it cannot be read.
func hostNameservers(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			out = append(out, net.JoinHostPort(f[1], "53"))
		}
	}
	return out
}
