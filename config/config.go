package config

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/audit/ship"
	"github.com/airlock-dev/airlock/budget"
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

// API is the pool API listener.
type API struct {
	// Listen is ADDRESS:PORT; beyond loopback only with TLS.
	Listen string `yaml:"listen"`
	// TLS serves the API over TLS with this certificate and key (PEM files).
	TLS APITLS `yaml:"tls"`
	// Advertise is the URL other nodes reach this API at (for example
	// https://node-2.internal:7070); empty derives it from listen.
	Advertise string `yaml:"advertise"`
	// NodeSecretFile holds the deployment's node secret, which signs the calls nodes forward
	// to each other; every node must have the same one. Empty: the nodes share one through
	// Redis (made by the first node to start).
	NodeSecretFile string `yaml:"node_secret_file"`
	// PeerCAFile holds extra roots (PEM) for verifying other nodes' API certificates.
	PeerCAFile string `yaml:"peer_ca_file"`
	// Keys are the API keys, stored as the hex SHA-256 of the key, each belonging to a tenant.
	Keys []APIKey `yaml:"keys"`
	// RatePerKey and BurstPerKey limit requests per API key (429 past them); 0 disables.
	RatePerKey  int `yaml:"rate_per_key"`
	BurstPerKey int `yaml:"burst_per_key"`
	// MaxPortsPerLease bounds the ports one lease may expose with `airlock port` at once; each
	// is a listener on the node. 0 means 8.
	MaxPortsPerLease int `yaml:"max_ports_per_lease"`
	// Streams bounds the calls held open (commands, process output and waits, file transfers,
	// audit pages), per tenant and for the node.
	Streams Slots `yaml:"streams"`
	// Calls bounds every other call in progress, per tenant (or reviewer key, on the approval
	// endpoints) and for the node, with a share kept for reviewer keys.
	Calls Slots `yaml:"calls"`
	// Connections bounds the API's connections per address and in all, before any key is
	// known.
	Connections Connections `yaml:"connections"`
	// Timeouts bound how long an API connection goes without progress.
	Timeouts Timeouts `yaml:"timeouts"`
}

// APITLS is the API's certificate.
type APITLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether a certificate is configured.
func (t APITLS) Enabled() bool { return t.CertFile != "" }

// APIKey is one API key, by its hash.
type APIKey struct {
	Tenant string `yaml:"tenant"`
	SHA256 string `yaml:"sha256"`
}

// Redis is the shared store.
type Redis struct {
	// URL of an external Redis; empty runs a private redis-server in the state dir.
	URL   string        `yaml:"url"`
	Grace time.Duration `yaml:"grace"` // how long cached bindings serve with Redis down
}

// Vault is the credential source.
type Vault struct {
	// Address of an external Vault; empty runs a private dev server seeded with the demo secret.
	Address   string `yaml:"address"`
	TokenFile string `yaml:"token_file"`
	// Binary is the vault executable for the dev server; empty looks beside airlock, then PATH.
	Binary string    `yaml:"binary"`
	Auth   VaultAuth `yaml:"auth"`
	// RevokeRetryFor is how long a revocation of per-lease material that keeps failing is
	// retried before it is given up (recorded in the audit trail; the material still expires
	// with its lease). 0 means 24h.
	RevokeRetryFor time.Duration `yaml:"revoke_retry_for"`
}

// VaultAuth is how the gateway logs in to an external Vault.
type VaultAuth struct {
	// Method is "token" (token_file or VAULT_TOKEN) or "approle".
	Method          string `yaml:"method"`
	RoleIDFile      string `yaml:"role_id_file"`
	SecretIDFile    string `yaml:"secret_id_file"`
	SecretIDWrapped bool   `yaml:"secret_id_wrapped"` // the file holds a response-wrapping token
	Mount           string `yaml:"mount"`             // the auth mount; default: the method's name
	// Role and JWTFile are for the jwt and kubernetes methods (kubernetes defaults to the pod's
	// service account token).
	Role    string `yaml:"role"`
	JWTFile string `yaml:"jwt_file"`
}

// Network is the sandbox network.
type Network struct {
	Name   string `yaml:"name"`
	Bridge string `yaml:"bridge"`
	Subnet string `yaml:"subnet"`
}

// Kubernetes is the Kubernetes backend: the node agent runs on one Kubernetes node (a
// DaemonSet, host network) and keeps its sandboxes as Pods placed on that node.
type Kubernetes struct {
	// Kubeconfig reaches the API server; empty means the agent's own service account.
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds the sandboxes' Pods (the agent's RBAC is limited to it).
	Namespace string `yaml:"namespace"`
	// NodeName is the Kubernetes node the Pods are placed on; empty means $NODE_NAME (the
	// DaemonSet sets it from spec.nodeName).
	NodeName string `yaml:"node_name"`
	// HostAddr is the node's address as its Pods reach it; the gateway and the resolver listen
	// there. PodCIDR is the node's Pod network, which the node firewall confines. Empty: read
	// from the Node object (its InternalIP and spec.podCIDR).
	HostAddr string `yaml:"host_addr"`
	PodCIDR  string `yaml:"pod_cidr"`
	// FirewallNetns, when set, names the network namespace (under /run/netns) that holds the
	// node's Pod network, where it is not the agent's own.
	FirewallNetns string `yaml:"firewall_netns"`
	// NetworkPolicy also makes a NetworkPolicy that confines the Pods the same way, for network
	// plugins that enforce one (the node firewall is made either way).
	NetworkPolicy bool `yaml:"network_policy"`
	// RuntimeClasses maps a template's runtime (runsc, runsc-ptrace, runsc-kvm) to the
	// RuntimeClass its Pods run under.
	RuntimeClasses map[string]string `yaml:"runtime_classes"`
	// DisableIPv6 turns IPv6 off in every Pod (the kubelet must allow the sysctls
	// net.ipv6.conf.all.disable_ipv6 and net.ipv6.conf.default.disable_ipv6).
	DisableIPv6 bool `yaml:"disable_ipv6"`
}

// Gateway is the egress proxy.
type Gateway struct {
	Port int `yaml:"port"`
	// TransparentPort takes the connections sandboxes make to ports 80 and 443 without the
	// proxy (the sandbox network redirects them there), under the same rules; -1 turns the
	// redirect off, and such clients simply fail to connect.
	TransparentPort int `yaml:"transparent_port"`
	// PrivateUpstreams pins names to private addresses, one name and port at a time.
	PrivateUpstreams []PrivateUpstream `yaml:"private_upstreams"`
	// UpstreamCAFiles are extra roots for verifying upstream TLS (besides the system's).
	UpstreamCAFiles []string `yaml:"upstream_ca_files"`
	// Budget bounds each lease's requests and bytes sent upstream; a token may narrow it.
	Budget budget.Budget `yaml:"budget"`
	// Approvals are the settings of scopes that hold requests for a reviewer.
	Approvals Approvals `yaml:"approvals"`
	// Mirrors send requests for a public name to an operator's server instead.
	Mirrors []Mirror `yaml:"mirrors"`
}

// Approvals are how requests a scope asks approval for are held.
type Approvals struct {
	// Hold is how long a request waits before the sandbox is told it is pending; TTL how long
	// an unanswered approval lasts.
	Hold time.Duration `yaml:"hold"`
	TTL  time.Duration `yaml:"ttl"`
	// Webhook, when set, receives each new approval as JSON (POST), for reviewers to be told.
	Webhook string `yaml:"webhook"`
	// AllowSelf lets the API key that leased approve its own lease's requests.
	AllowSelf bool `yaml:"allow_self"`
}

// Profile is one named bundle of scopes.
type Profile struct {
	Name   string        `yaml:"name"`
	Scopes []scope.Scope `yaml:"scopes"`
}

// ProfileSet is the built-in profiles with the configured ones over them.
func (c *Config) ProfileSet() (scope.Profiles, error) {
	out := scope.Builtin()
	for i, p := range c.Profiles {
		set, err := scope.Parse(p.Scopes)
		if err != nil {
			return nil, fmt.Errorf("profiles[%d] (%s): %v", i, p.Name, err)
		}
		out[p.Name] = set
	}
	return out, nil
}

// Mirror sends what is asked of Host:Port to To, a server of the operator's such as an internal
// mirror of a public registry. Scopes are still decided on Host; the credential catalog, TLS and
// the dial are To's.
type Mirror struct {
	Host string `yaml:"host"`
	Port int    `yaml:"port"` // 0 means 443
	// To is the mirror's URL: https://HOST[:PORT] (or http://, with no credential sent).
	To string `yaml:"to"`
}

// PrivateUpstream pins Host:Port to Address.
type PrivateUpstream struct {
	Host    string `yaml:"host"`
	Port    int    `yaml:"port"`
	Address string `yaml:"address"`
}

// Resolver is the filtering DNS resolver.
type Resolver struct {
	Port      int      `yaml:"port"`
	Upstreams []string `yaml:"upstreams"` // empty: the host's /etc/resolv.conf nameservers
	// NXDomain answers refused names with NXDOMAIN instead of REFUSED.
	NXDomain    bool          `yaml:"nxdomain"`
	CacheMaxTTL time.Duration `yaml:"cache_max_ttl"`
	CacheNegTTL time.Duration `yaml:"cache_neg_ttl"`
	// RateQPS and RateBurst limit queries per sandbox; -1 disables.
	RateQPS   int    `yaml:"rate_qps"`
	RateBurst int    `yaml:"rate_burst"`
	Tunnel    Tunnel `yaml:"tunnel"`
}

// Tunnel holds the resolver's tunnel heuristics for names under wildcard scopes.
type Tunnel struct {
	MaxLabel    int           `yaml:"max_label"`
	MaxName     int           `yaml:"max_name"`
	EntropyBits float64       `yaml:"entropy_bits"`
	MaxDistinct int           `yaml:"max_distinct"`
	Window      time.Duration `yaml:"window"`
}

// Audit is the audit trail.
type Audit struct {
	Dir        string        `yaml:"dir"` // empty: audit/ in the state dir
	FlushEvery time.Duration `yaml:"flush_every"`
	// Segments are sealed at SegmentBytes or after SegmentAge; sealed ones are deleted when
	// older than KeepFor or while the trail is larger than KeepBytes (zero: never).
	SegmentBytes int64         `yaml:"segment_bytes"`
	SegmentAge   time.Duration `yaml:"segment_age"`
	KeepFor      time.Duration `yaml:"keep_for"`
	KeepBytes    int64         `yaml:"keep_bytes"`
	// Key is the node's checkpoint signing key (created when missing; its public half is
	// written beside it as Key+".pub"). Empty: audit-key in the state dir.
	Key             string        `yaml:"key"`
	CheckpointEvery time.Duration `yaml:"checkpoint_every"`
	// OutputHead is how many bytes of each command's stdout and stderr its exec record keeps,
	// redacted of the lease's credentials (0: none; sizes and SHA-256 are always recorded).
	OutputHead int `yaml:"output_head"`
	// Sinks push every record, after the local write, to syslog receivers and HTTP endpoints.
	Sinks []ship.Config `yaml:"sinks"`
}

// Review is the review page for security teams, served on a listener of its own.
type Review struct {
	// Listen is ADDRESS:PORT; empty serves no page. Beyond loopback only with TLS. Never the
	// API's address.
	Listen string `yaml:"listen"`
	TLS    APITLS `yaml:"tls"`
	// Reviewers are the reviewer keys (read and mark only; the API does not take them). A
	// tenant's API key signs in too, and sees that tenant's leases.
	Reviewers []ReviewerKey `yaml:"reviewers"`
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration `yaml:"session_ttl"`
	// Streams bounds the live tails and exports, per identity and for the node, with a share
	// kept for reviewer keys.
	Streams Slots `yaml:"streams"`
	// Calls bounds every other page and form in progress, the same way.
	Calls Slots `yaml:"calls"`
	// Connections bounds the page's connections per address and in all, before anyone signs
	// in.
	Connections Connections `yaml:"connections"`
	// Timeouts bound how long a connection to the page goes without progress.
	Timeouts Timeouts `yaml:"timeouts"`
}

// E2B serves E2B's control plane and sandbox API (package e2b) on a listener of its own, so the
// unchanged E2B SDKs drive this node's sandboxes.
type E2B struct {
	// Listen is ADDRESS:PORT; empty serves none. Beyond loopback only with TLS. Never the API's
	// or the review page's address.
	Listen string `yaml:"listen"`
	TLS    APITLS `yaml:"tls"`
	// Domain is the sandbox domain the SDK is told (getHost(port) answers PORT-ID.DOMAIN); a
	// DNS name, empty for none.
	Domain string `yaml:"domain"`
	// Connections bounds the listener's connections per address and in all, before any key is
	// known. (A call's API work takes the tenant's api.calls and api.streams slots.)
	Connections Connections `yaml:"connections"`
	// Timeouts bound how long a connection to the listener goes without progress.
	Timeouts Timeouts `yaml:"timeouts"`
}

// ReviewerKey is one reviewer key, stored as the hex SHA-256 of the key.
type ReviewerKey struct {
	Name   string `yaml:"name"`
	SHA256 string `yaml:"sha256"`
	// Tenants are the tenants it reads; "*" reads every tenant.
	Tenants []string `yaml:"tenants"`
}

// Tokens are the task token issuers this node trusts.
type Tokens struct {
	Issuers []Issuer `yaml:"issuers"`
}

// Issuer is one trusted issuer.
type Issuer struct {
	Name   string            `yaml:"name"`
	Keys   map[string]string `yaml:"keys"` // kid -> PEM public key file
	MaxTTL time.Duration     `yaml:"max_ttl"`
	// Tenants the issuer may speak for: a lease's API key, or a token presented to the
	// gateway by a client outside the pool, for any other tenant is refused. Required; "*"
	// allows every tenant, for an issuer that serves them all.
	Tenants []string `yaml:"tenants"`
}

// Pool holds node-wide pool settings.
type Pool struct {
	// KeepOnStop keeps sandboxes, leases, the sandbox network and its firewall rules when the
	// node stops, and adopts them when it starts again: a production node restarts without
	// ending leases. Off (the dev default), a stop removes everything it made.
	KeepOnStop bool `yaml:"keep_on_stop"`
	// HealthEvery is how often warm sandboxes are probed.
	HealthEvery time.Duration `yaml:"health_every"`
	// RefillParallel is how many sandboxes the refill makes at once (0: pool's default, the
	// best measured on the engine of a 2-core machine; see docs/bench-pool.md).
	RefillParallel int `yaml:"refill_parallel"`
	// MemoryBudgetMB bounds the memory limits of all the node's sandboxes together, warm,
	// leased and being made: no sandbox is made past it. 0: the host's physical memory.
	MemoryBudgetMB int64 `yaml:"memory_budget_mb"`
}

// Dev holds what only the all-in-one dev node does.
type Dev struct {
	// Issuer mints task tokens from --allow lists, with any scope, for any API key: off by
	// default, on only in the embedded defaults of `airlock up` without --config (and refused
	// with an API beyond loopback). Never on a production node.
	Issuer bool `yaml:"issuer"`
	// DemoUpstream, when set, runs a tiny HTTPS server there that checks the demo credential,
	// pinned as api.example.test:443.
	DemoUpstream string `yaml:"demo_upstream"`
}

// DemoHost is the name the demo upstream answers to.
const DemoHost = "api.example.test"

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

// DefaultTemplate is the hardened default sandbox.
func DefaultTemplate() pool.Template {
	return pool.Template{
		Name: "default", Image: "airlock/default:latest", User: "10001:10001", Workdir: "/workspace",
		CPUs: 1, MemoryMB: 512, Pids: 256, WorkspaceMB: 256, TmpMB: 64, NoFile: 4096, NProc: 4096, Runtime: "runc",
		MinWarm: 2, MaxWarm: 16, MaxTotal: 32, OnEmpty: "wait", WaitFor: 10 * time.Second, AfterWait: "cold", DefaultTTL: 30 * time.Minute, MaxTTL: 4 * time.Hour,
	}
}

// Toolchain is a shipped toolchain template ("python": python3, venv, pip, pytest; "node":
// Debian's nodejs and npm): the default's hardening and sizes, its own image, one warm sandbox.
func Toolchain(name string) pool.Template {
	t := DefaultTemplate()
	t.Name, t.Image, t.MinWarm, t.MaxWarm = name, "airlock/"+name+":latest", 1, 4
	t.MemoryMB, t.WorkspaceMB = 1024, 512
	return t
}

// GVisor is the default template under gVisor's runsc, a user-space kernel between the
// sandbox and the host's: the embedded defaults warm it where the engine has runsc.
func GVisor() pool.Template {
	t := DefaultTemplate()
	t.Name, t.Runtime, t.MinWarm, t.MaxWarm = "gvisor", "runsc", 1, 4
	return t
}

// builtImage is the image a template built from a Dockerfile or devcontainer.json is tagged
// with unless it names one.
func builtImage(name string) string { return "airlock/template-" + name + ":latest" }

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

// Subnet returns the parsed sandbox subnet; call after Validate.
func (c *Config) Subnet() netip.Prefix { return netip.MustParsePrefix(c.Network.Subnet) }

// MirrorTarget is where a Mirror sends requests.
type MirrorTarget struct {
	Host   string // canonical
	Port   int
	Scheme string
	To     string // host:port
	Key    string // the "host:port" asked
}

// Target checks m and says where it sends requests.
func (m Mirror) Target() (MirrorTarget, error) {
	host, err := scope.CanonicalHost(m.Host)
	if err != nil || m.Host == "" {
		return MirrorTarget{}, fmt.Errorf("host %q: not a host name", m.Host)
	}
	port := m.Port
	if port == 0 {
		port = 443
	}
	if port < 1 || port > 65535 {
		return MirrorTarget{}, fmt.Errorf("port %d: must be 1-65535", m.Port)
	}
	u, err := url.Parse(m.To)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return MirrorTarget{}, fmt.Errorf("to %q: want https://HOST[:PORT] or http://HOST[:PORT], nothing after it", m.To)
	}
	toHost, err := scope.CanonicalHost(u.Hostname())
	if err != nil {
		return MirrorTarget{}, fmt.Errorf("to %q: %v", m.To, err)
	}
	toPort := 443
	if u.Scheme == "http" {
		toPort = 80
	}
	if p := u.Port(); p != "" {
		if toPort, err = strconv.Atoi(p); err != nil || toPort < 1 || toPort > 65535 {
			return MirrorTarget{}, fmt.Errorf("to %q: bad port", m.To)
		}
	}
	return MirrorTarget{Host: toHost, Port: toPort, Scheme: u.Scheme, To: net.JoinHostPort(toHost, strconv.Itoa(toPort)),
		Key: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

// validateE2B checks the E2B listener's settings.
func (c *Config) validateE2B(bad func(field, format string, args ...any)) {
	e := c.E2B
	if e.Listen != "" {
		if ap, err := netip.ParseAddrPort(e.Listen); err != nil {
			bad("e2b.listen", "%q is not ADDRESS:PORT", e.Listen)
		} else if !ap.Addr().IsLoopback() && !e.TLS.Enabled() {
			bad("e2b.listen", "%s is not a loopback address; the E2B listener may listen beyond loopback only with TLS (e2b.tls.cert_file and key_file)", ap.Addr())
		}
		if e.Listen == c.API.Listen || e.Listen == c.Review.Listen {
			bad("e2b.listen", "is the API's or the review page's address; the E2B listener has one of its own")
		}
	}
	if (e.TLS.CertFile == "") != (e.TLS.KeyFile == "") {
		bad("e2b.tls", "cert_file and key_file go together")
	}
	if e.Listen != "" {
		e.Connections.validate("e2b.connections", bad)
		e.Timeouts.validate("e2b.timeouts", bad)
	}
	if e.Domain != "" && !dnsName.MatchString(e.Domain) {
		bad("e2b.domain", "%q is not a DNS name (no scheme, port or path)", e.Domain)
	}
}

var dnsName = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)

// validateReview checks the review page's settings.
func (c *Config) validateReview(bad func(field, format string, args ...any)) {
	r := c.Review
	if r.Listen != "" {
		if ap, err := netip.ParseAddrPort(r.Listen); err != nil {
			bad("review.listen", "%q is not ADDRESS:PORT", r.Listen)
		} else if !ap.Addr().IsLoopback() && !r.TLS.Enabled() {
			bad("review.listen", "%s is not a loopback address; the review page may listen beyond loopback only with TLS (review.tls.cert_file and key_file)", ap.Addr())
		}
		if r.Listen == c.API.Listen {
			bad("review.listen", "is the API's address; the review page is served on an origin of its own")
		}
	}
	if (r.TLS.CertFile == "") != (r.TLS.KeyFile == "") {
		bad("review.tls", "cert_file and key_file go together")
	}
	if r.SessionTTL < time.Minute || r.SessionTTL > 7*24*time.Hour {
		bad("review.session_ttl", "must be between 1m and 168h")
	}
	r.Streams.validate("review.streams", true, bad)
	r.Calls.validate("review.calls", true, bad)
	r.Connections.validate("review.connections", bad)
	r.Timeouts.validate("review.timeouts", bad)
	names := map[string]bool{}
	for i, k := range r.Reviewers {
		f := fmt.Sprintf("review.reviewers[%d]", i)
		if k.Name == "" || strings.HasPrefix(k.Name, "tenant:") || names[k.Name] {
			bad(f+".name", "required, unique, and not beginning with \"tenant:\" (the name tenants' API keys sign in under)")
		}
		names[k.Name] = true
		if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
			bad(f+".sha256", "must be the 64 hex digits of the key's SHA-256 (never the key itself)")
		}
		for _, a := range c.API.Keys {
			if strings.EqualFold(a.SHA256, k.SHA256) {
				bad(f+".sha256", "is also an API key (of tenant %s); a reviewer key must not be able to lease or run anything", a.Tenant)
			}
		}
		if len(k.Tenants) == 0 {
			bad(f+".tenants", "name the tenants it reads, or \"*\" for every tenant")
		}
		for _, t := range k.Tenants {
			if t == "" {
				bad(f+".tenants", "an empty tenant name")
			}
		}
	}
}
