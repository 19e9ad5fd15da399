package config

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/inside"
	"github.com/airlock-dev/airlock/scope"
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
		E2B: E2B{Connections: DefaultAPIConnections, Timeouts: DefaultTimeouts},
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

// Validate checks every field and names the first one that is wrong.
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
	if ap, err := netip.ParseAddrPort(c.API.Listen); err != nil {
		bad("api.listen", "%q is not ADDRESS:PORT", c.API.Listen)
	} else if !ap.Addr().IsLoopback() && !c.API.TLS.Enabled() {
		bad("api.listen", "%s is not a loopback address; the API may listen beyond loopback only with TLS (api.tls.cert_file and key_file)", ap.Addr())
	}
	if (c.API.TLS.CertFile == "") != (c.API.TLS.KeyFile == "") {
		bad("api.tls", "cert_file and key_file go together")
	}
	if a := c.API.Advertise; a != "" {
		if u, err := url.Parse(a); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
			bad("api.advertise", "%q is not a URL such as https://node-2.internal:7070", a)
		} else if (u.Scheme == "https") != c.API.TLS.Enabled() {
			bad("api.advertise", "its scheme must be https exactly when api.tls is set")
		}
	}
	for i, k := range c.API.Keys {
		if k.Tenant == "" {
			bad(fmt.Sprintf("api.keys[%d].tenant", i), "required")
		}
		if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
			bad(fmt.Sprintf("api.keys[%d].sha256", i), "must be the 64 hex digits of the key's SHA-256 (never the key itself)")
		}
	}
	c.validateReview(bad)
	c.validateE2B(bad)
	if a := c.Gateway.Approvals; a.Hold < time.Second || a.Hold > 10*time.Minute || a.TTL < a.Hold || a.TTL > 24*time.Hour {
		bad("gateway.approvals", "hold must be 1s to 10m and ttl from hold to 24h (hold %s, ttl %s)", a.Hold, a.TTL)
	}
	if u := c.Gateway.Approvals.Webhook; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" {
			bad("gateway.approvals.webhook", "%q is not an http(s) URL", u)
		}
	}
	if c.API.RatePerKey < 0 || c.API.BurstPerKey < 0 {
		bad("api.rate_per_key", "must be >= 0")
	}
	if c.API.MaxPortsPerLease < 0 || c.API.MaxPortsPerLease > 1000 {
		bad("api.max_ports_per_lease", "must be between 0 (the default, 8) and 1000")
	}
	c.API.Streams.validate("api.streams", false, bad)
	c.API.Calls.validate("api.calls", true, bad)
	c.API.Connections.validate("api.connections", bad)
	c.API.Timeouts.validate("api.timeouts", bad)
	switch c.Vault.Auth.Method {
	case "", "token":
	case "approle":
		if c.Vault.Auth.RoleIDFile == "" || c.Vault.Auth.SecretIDFile == "" {
			bad("vault.auth", "approle needs role_id_file and secret_id_file")
		}
	case "jwt", "kubernetes":
		if c.Vault.Auth.Role == "" {
			bad("vault.auth.role", "required for %s login", c.Vault.Auth.Method)
		}
		if c.Vault.Auth.Method == "jwt" && c.Vault.Auth.JWTFile == "" {
			bad("vault.auth.jwt_file", "required for jwt login")
		}
	default:
		bad("vault.auth.method", "%q is not token, approle, jwt or kubernetes", c.Vault.Auth.Method)
	}
	if c.Vault.RevokeRetryFor < 0 {
		bad("vault.revoke_retry_for", "must be >= 0")
	}
	if c.Pool.HealthEvery < 0 {
		bad("pool.health_every", "must be >= 0")
	}
	if c.Pool.RefillParallel < 0 || c.Pool.RefillParallel > 64 {
		bad("pool.refill_parallel", "must be between 0 and 64")
	}
	if c.Pool.MemoryBudgetMB < 0 {
		bad("pool.memory_budget_mb", "must be >= 0")
	}
	if c.Redis.Grace < 0 || c.Redis.Grace > time.Minute {
		bad("redis.grace", "must be between 0 and 1m")
	}
	switch c.Backend {
	case "", "docker":
	case "kubernetes":
		k := c.Kubernetes
		if k.Namespace == "" {
			bad("kubernetes.namespace", "required with backend kubernetes")
		}
		if k.NodeName == "" && os.Getenv("NODE_NAME") == "" {
			bad("kubernetes.node_name", "required with backend kubernetes (or NODE_NAME in the environment)")
		}
		if a, err := netip.ParseAddr(k.HostAddr); k.HostAddr != "" && (err != nil || !a.Is4()) {
			bad("kubernetes.host_addr", "%q is not the IPv4 address at which the node's Pods reach it", k.HostAddr)
		}
		if p, err := netip.ParsePrefix(k.PodCIDR); k.PodCIDR != "" && (err != nil || !p.Addr().Is4() || p.Masked() != p) {
			bad("kubernetes.pod_cidr", "%q is not the node's IPv4 Pod network such as 10.244.0.0/24", k.PodCIDR)
		}
		if strings.ContainsAny(k.FirewallNetns, "/\x00") || k.FirewallNetns == "." || k.FirewallNetns == ".." {
			bad("kubernetes.firewall_netns", "%q is not a network namespace name", k.FirewallNetns)
		}
		for rt, class := range k.RuntimeClasses {
			if !strings.HasPrefix(rt, "runsc") || class == "" {
				bad("kubernetes.runtime_classes", "%q: %q must map a runsc runtime to a RuntimeClass name", rt, class)
			}
		}
	default:
		bad("backend", "%q is not docker or kubernetes", c.Backend)
	}
	if c.Network.Name == "" {
		bad("network.name", "required")
	}
	if n := len(c.Network.Bridge); n == 0 || n > 15 {
		bad("network.bridge", "must be 1 to 15 characters (a Linux interface name)")
	}
	if p, err := netip.ParsePrefix(c.Network.Subnet); err != nil || !p.Addr().Is4() || p.Bits() > 28 || p.Masked() != p {
		bad("network.subnet", "%q is not an IPv4 network such as 10.213.0.0/24", c.Network.Subnet)
	}
	if c.Gateway.Port < 1 || c.Gateway.Port > 65535 {
		bad("gateway.port", "must be 1-65535")
	}
	for i, m := range c.Gateway.Mirrors {
		if _, err := m.Target(); err != nil {
			bad(fmt.Sprintf("gateway.mirrors[%d]", i), "%v", err)
		}
	}
	profileNames := map[string]bool{}
	for i, p := range c.Profiles {
		switch {
		case p.Name == "" || strings.ContainsAny(p.Name, "@, \t"):
			bad(fmt.Sprintf("profiles[%d].name", i), "required, without @, commas or spaces")
		case profileNames[p.Name]:
			bad(fmt.Sprintf("profiles[%d].name", i), "%q is defined twice", p.Name)
		case len(p.Scopes) == 0:
			bad(fmt.Sprintf("profiles[%d].scopes", i), "required")
		}
		profileNames[p.Name] = true
		if _, err := scope.Parse(p.Scopes); err != nil {
			bad(fmt.Sprintf("profiles[%d].scopes", i), "%v", err)
		}
	}
	if tp := c.Gateway.TransparentPort; tp != -1 && (tp < 1 || tp > 65535 || tp == c.Gateway.Port || tp == c.Resolver.Port) {
		bad("gateway.transparent_port", "must be 1-65535, not the gateway's or the resolver's port, or -1 for no redirect")
	}
	for i, u := range c.Gateway.PrivateUpstreams {
		f := fmt.Sprintf("gateway.private_upstreams[%d]", i)
		if _, err := scope.CanonicalHost(u.Host); err != nil || u.Host == "" || strings.HasPrefix(u.Host, "*") {
			bad(f+".host", "must be one exact name")
		}
		if u.Port < 1 || u.Port > 65535 {
			bad(f+".port", "must be 1-65535")
		}
		if _, err := netip.ParseAddrPort(u.Address); err != nil {
			bad(f+".address", "%q is not ADDRESS:PORT", u.Address)
		}
	}
	if c.Gateway.Budget.Requests < 0 || c.Gateway.Budget.BytesUp < 0 {
		bad("gateway.budget", "limits must be >= 0 (0 means no limit)")
	}
	if c.Resolver.Port < 1 || c.Resolver.Port > 65535 {
		bad("resolver.port", "must be 1-65535")
	}
	if c.Audit.SegmentBytes < 64<<10 || c.Audit.SegmentBytes > 1<<30 {
		bad("audit.segment_bytes", "must be 64 KiB to 1 GiB (%d)", c.Audit.SegmentBytes)
	}
	if c.Audit.SegmentAge < time.Second || c.Audit.CheckpointEvery < 100*time.Millisecond || c.Audit.FlushEvery <= 0 {
		bad("audit", "segment_age must be >= 1s, checkpoint_every >= 100ms and flush_every > 0")
	}
	sinks := map[string]bool{}
	for i, sk := range c.Audit.Sinks {
		if err := sk.Validate(); err != nil {
			bad(fmt.Sprintf("audit.sinks[%d]", i), "%v", err)
		}
		if sinks[sk.Name] {
			bad(fmt.Sprintf("audit.sinks[%d].name", i), "%q is used twice", sk.Name)
		}
		sinks[sk.Name] = true
	}
	if c.Audit.OutputHead < 0 || c.Audit.OutputHead > 64<<10 {
		bad("audit.output_head", "must be 0 to 65536 bytes")
	}
	if c.Audit.KeepFor < 0 || c.Audit.KeepBytes < 0 {
		bad("audit", "keep_for and keep_bytes must be >= 0 (0 keeps everything)")
	}
	if c.Audit.KeepBytes > 0 && c.Audit.KeepBytes < 2*c.Audit.SegmentBytes {
		bad("audit.keep_bytes", "must be at least twice audit.segment_bytes, or retention would delete every sealed segment at once")
	}
	for i, u := range c.Resolver.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			bad(fmt.Sprintf("resolver.upstreams[%d]", i), "%q is not ADDRESS:PORT", u)
		}
	}
	if c.Resolver.CacheMaxTTL < 0 || c.Resolver.CacheNegTTL < 0 {
		bad("resolver.cache_max_ttl", "must be >= 0")
	}
	if t := c.Resolver.Tunnel; t.MaxLabel < 0 || t.MaxName < 0 || t.EntropyBits < 0 || t.MaxDistinct < 0 || t.Window < 0 {
		bad("resolver.tunnel", "limits must be >= 0 (0 takes the default)")
	}
	for i, iss := range c.Tokens.Issuers {
		if iss.Name == "" {
			bad(fmt.Sprintf("tokens.issuers[%d].name", i), "required")
		}
		if len(iss.Keys) == 0 {
			bad(fmt.Sprintf("tokens.issuers[%d].keys", i), "at least one key file is required")
		}
		if len(iss.Tenants) == 0 || slices.Contains(iss.Tenants, "") {
			bad(fmt.Sprintf("tokens.issuers[%d].tenants", i), "list the tenants this issuer may speak for (\"*\" for every tenant)")
		}
	}
	if c.Dev.Issuer {
		if ap, err := netip.ParseAddrPort(c.API.Listen); err == nil && !ap.Addr().IsLoopback() {
			bad("dev.issuer", "the dev issuer mints tokens with any scope for whoever holds an API key; it may be on only while the API listens on loopback")
		}
	}
	if c.Dev.DemoUpstream != "" {
		if _, err := netip.ParseAddrPort(c.Dev.DemoUpstream); err != nil {
			bad("dev.demo_upstream", "%q is not ADDRESS:PORT", c.Dev.DemoUpstream)
		}
	}
	if _, err := broker.NewCatalog(c.Creds); err != nil {
		errs = append(errs, err)
	}
	if len(c.Templates) == 0 {
		bad("templates", "at least one template is required")
	}
	names := map[string]bool{}
	for i, t := range c.Templates {
		f := fmt.Sprintf("templates[%d]", i)
		if t.Name != "" && names[t.Name] {
			bad(f+".name", "duplicate %q", t.Name)
		}
		names[t.Name] = true
		for _, err := range t.Validate() {
			errs = append(errs, fmt.Errorf("%s.%w", f, err))
		}
		if repo, _, _ := strings.Cut(t.Image, ":"); t.Built() && slices.Contains(inside.ShippedImages, strings.TrimPrefix(repo, "airlock/")) {
			bad(f+".image", "%s is a shipped image; a template built from a Dockerfile or devcontainer.json writes its own (leave image out: %s)", t.Image, builtImage(t.Name))
		}
	}
	return errors.Join(errs...)
}
