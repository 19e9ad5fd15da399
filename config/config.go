package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/pool"
)

// Config is a node's whole configuration.
type Config struct {
	// Node names this node; containers, networks and bindings carry it.
	Node string `yaml:"node"`
	// Deployment is the tokens' audience and the Redis key prefix.
	Deployment string `yaml:"deployment"`
	// StateDir holds the CA, the audit trail, the dev Redis and Vault data and the client file.
	StateDir string  `yaml:"state_dir"`
	API      API     `yaml:"api"`
	Redis    Redis   `yaml:"redis"`
	Vault    Vault   `yaml:"vault"`
	Network  Network `yaml:"network"`
	// Backend is where sandboxes run: "docker" (the default: the local engine, on Network) or
	// "kubernetes" (Pods on the Kubernetes node this agent runs on, see Kubernetes).
	Backend    string          `yaml:"backend"`
	Kubernetes Kubernetes      `yaml:"kubernetes"`
	Gateway    Gateway         `yaml:"gateway"`
	Resolver   Resolver        `yaml:"resolver"`
	Audit      Audit           `yaml:"audit"`
	Review     Review          `yaml:"review"`
	E2B        E2B             `yaml:"e2b"`
	Tokens     Tokens          `yaml:"tokens"`
	Dev        Dev             `yaml:"dev"`
	Pool       Pool            `yaml:"pool"`
	Snapshots  Snapshots       `yaml:"snapshots"`
	Creds      []broker.Entry  `yaml:"credentials"`
	Templates  []pool.Template `yaml:"templates"`
	// Profiles are named bundles of scopes a token asks for by name ("profiles": ["pypi"]),
	// beside the built-in ones (scope.Builtin), which a profile of the same name replaces.
	Profiles []Profile `yaml:"profiles"`
	// Loaded is what the files named above hold; Load fills it (see Loaded).
	Loaded Loaded `yaml:"-"`
}

// Default returns the defaults a configuration file is read over: safe for production, so the
// dev-only parts (the dev issuer, the demo upstream) are off. DevDefaults turns them on.
func Default() Config {
	return Config{
		Node:       "node-1",
		Deployment: "airlock-dev",
		API: API{Listen: "127.0.0.1:7070", RatePerKey: 100, BurstPerKey: 200, Streams: DefaultAPIStreams, Calls: DefaultAPICalls,
			Connections: DefaultAPIConnections, Timeouts: DefaultTimeouts},
		Redis:   Redis{Grace: 10 * time.Second},
		Network: Network{Name: "airlock-node-1", Bridge: "airlock0", Subnet: "10.213.0.0/24"},
		Gateway: Gateway{Port: 3128, TransparentPort: 3129, Approvals: Approvals{Hold: 30 * time.Second, TTL: 10 * time.Minute}},
		Resolver: Resolver{Port: 53, CacheMaxTTL: 5 * time.Minute, CacheNegTTL: 30 * time.Second, RateQPS: 200, RateBurst: 400,
			Tunnel: Tunnel{MaxLabel: 40, MaxName: 120, EntropyBits: 3.8, MaxDistinct: 200, Window: 5 * time.Minute}},
		Audit: Audit{FlushEvery: 20 * time.Millisecond, SegmentBytes: 64 << 20, SegmentAge: time.Hour, KeepBytes: 10 << 30,
			CheckpointEvery: 10 * time.Second, OutputHead: 1024},
		E2B:       E2B{Connections: DefaultAPIConnections, Timeouts: DefaultTimeouts},
		Snapshots: Snapshots{Retention: DefaultRetention},
		Review: Review{SessionTTL: 8 * time.Hour, Streams: DefaultReviewStreams, Calls: DefaultReviewCalls,
			Connections: DefaultReviewConnections, Timeouts: DefaultTimeouts},
		Creds: []broker.Entry{{
			Name:   "demo",
			Source: broker.Source{Kind: broker.SourceKV, Mount: "secret", Path: "airlock/demo", TTL: 5 * time.Minute},
			Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "Bearer {{.token}}"},
			Hosts:  []string{DemoHost},
		}, {
			// A Vault token minted for each lease on first use and revoked when it ends; the
			// dev Vault of airlock up has the role and policy.
			Name:   "vault-task",
			Source: broker.Source{Kind: broker.SourceToken, Role: "airlock-task", Policies: []string{"airlock-task-read"}, TTL: 30 * time.Minute},
			Inject: broker.Injection{Kind: broker.InjectHeader, Header: "X-Vault-Token", Template: "{{.token}}"},
			Hosts:  []string{DemoHost},
		}},
		Templates: []pool.Template{DefaultTemplate(), Toolchain("python"), Toolchain("node")},
	}
}

// DevDefaults are the embedded defaults of `airlock up` run without a configuration file: an
// all-in-one dev node on loopback, with the dev issuer (which mints tokens with any scope for
// any API key) and the demo upstream on.
func DevDefaults() Config {
	c := Default()
	c.Templates = append(c.Templates, GVisor())
	c.Dev = Dev{Issuer: true, DemoUpstream: "127.0.0.1:7443"}
	c.Review.Listen = "127.0.0.1:7071"
	c.E2B.Listen = "127.0.0.1:7072"
	// The dev node has one API key, which leases every sandbox: let it answer its own approvals,
	// or no one could.
	c.Gateway.Approvals.AllowSelf = true
	return c
}

// Load reads path over Default, validates the result, and reads the files it names into
// Loaded; an empty path means DevDefaults.
// Templates and credentials given in the file replace the default lists whole; each template
// starts from DefaultTemplate.
func Load(path string) (Config, error) {
	if path == "" {
		c := DevDefaults()
		if err := c.Validate(); err != nil {
			return c, err
		}
		return c, c.load()
	}
	c := Default()
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	// YAML replaces lists whole; decode each template again over the defaults so a file names
	// only what it changes. Unknown fields were refused by the strict pass above.
	var probe struct {
		Templates []yaml.Node `yaml:"templates"`
	}
	if err := yaml.Unmarshal(b, &probe); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	for i := range probe.Templates {
		t := DefaultTemplate()
		if err := probe.Templates[i].Decode(&t); err != nil {
			return c, fmt.Errorf("config %s: templates[%d]: %w", path, i, err)
		}
		if t.Built() && t.Image == DefaultTemplate().Image {
			t.Image = builtImage(t.Name)
		}
		c.Templates[i] = t
	}
	// One configuration serves every node of a DaemonSet, each named by its environment.
	if n := os.Getenv("AIRLOCK_NODE"); n != "" {
		c.Node = n
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	if err := c.load(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Validate checks every field and returns every problem it finds, joined, each naming its
// field ("api.listen: ..."). Each section checks its own fields in a method beside its type;
// what compares one section with another is checked in validateAcross.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Node == "" || strings.ContainsAny(c.Node, " :/") {
		bad("node", "must be a non-empty name without spaces, ':' or '/'")
	}
	if c.Deployment == "" {
		bad("deployment", "required")
	}
	c.API.validate(bad)
	c.Redis.validate(bad)
	c.Vault.validate(bad)
	c.Network.validate(bad)
	switch c.Backend {
	case "", "docker":
	case "kubernetes":
		c.Kubernetes.validate(bad)
	default:
		bad("backend", "%q is not docker or kubernetes", c.Backend)
	}
	c.Gateway.validate(bad)
	c.Resolver.validate(bad)
	c.Audit.validate(bad)
	c.Review.validate(bad)
	c.E2B.validate(bad)
	c.Tokens.validate(bad)
	c.Dev.validate(bad)
	c.Pool.validate(bad)
	c.Snapshots.validate(bad)
	if _, err := broker.NewCatalog(c.Creds); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, validateTemplates(c.Templates, bad)...)
	validateProfiles(c.Profiles, bad)
	c.validateAcross(bad)
	return errors.Join(errs...)
}

// badFunc records that field is wrong, saying why with format and args: "field: why". A
// section's check reports every problem it finds through one, so that Validate returns them
// all at once.
type badFunc func(field, format string, args ...any)

// validateAcross checks the rules that compare one section with another, so belong to neither
// section's own check: the API, the review page and the E2B listener each on an address of its
// own; no reviewer key also an API key; the transparent port apart from the gateway's and the
// resolver's (checked whole here, since its rule names the resolver's port); and the dev issuer
// only while the API listens on loopback.
func (c *Config) validateAcross(bad badFunc) {
	if c.Review.Listen != "" && c.Review.Listen == c.API.Listen {
		bad("review.listen", "is the API's address; the review page is served on an origin of its own")
	}
	if e := c.E2B.Listen; e != "" && (e == c.API.Listen || e == c.Review.Listen) {
		bad("e2b.listen", "is the API's or the review page's address; the E2B listener has one of its own")
	}
	for i, k := range c.Review.Reviewers {
		for _, a := range c.API.Keys {
			if strings.EqualFold(a.SHA256, k.SHA256) {
				bad(fmt.Sprintf("review.reviewers[%d].sha256", i), "is also an API key (of tenant %s); a reviewer key must not be able to lease or run anything", a.Tenant)
			}
		}
	}
	if tp := c.Gateway.TransparentPort; tp != -1 && (tp < 1 || tp > 65535 || tp == c.Gateway.Port || tp == c.Resolver.Port) {
		bad("gateway.transparent_port", "must be 1-65535, not the gateway's or the resolver's port, or -1 for no redirect")
	}
	if c.Dev.Issuer {
		if ap, err := netip.ParseAddrPort(c.API.Listen); err == nil && !ap.Addr().IsLoopback() {
			bad("dev.issuer", "the dev issuer mints tokens with any scope for whoever holds an API key; it may be on only while the API listens on loopback")
		}
	}
}
