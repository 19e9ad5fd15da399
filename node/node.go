package node

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/exfil"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/gateway/broker"
	vaultbroker "github.com/airlock-dev/airlock/gateway/broker/vault"
	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/api"
	"github.com/airlock-dev/airlock/pool/docker"
	"github.com/airlock-dev/airlock/pool/redisstore"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

// Deps are the services the node talks to, already resolved (external, or started by the dev
// stack).
type Deps struct {
	RedisURL   string
	VaultAddr  string
	VaultToken string
	// APIKeys maps hashed API keys to tenants (see api.HashKey).
	APIKeys map[string]string
	// DevIssuer, when set, is trusted and mints tokens for --allow leases.
	DevIssuer *token.DevIssuer
	// Reloads delivers validated configurations to apply while running: the credential
	// catalog, private upstreams and gateway budget change; open connections stay open.
	// Other fields take effect at the next start.
	Reloads <-chan config.Config
}

// Ready describes a running node, for what `airlock up` prints and the client file.
type Ready struct {
	API      string `json:"api"`
	Gateway  string `json:"gateway"`
	Resolver string `json:"resolver"`
	Network  string `json:"network"`
	CA       string `json:"ca"`
	Audit    string `json:"audit"`
	// Warm reports, without a call to the API, whether every template's pool holds its
	// min_warm sandboxes, and if not which one lags.
	Warm func(context.Context) (bool, string) `json:"-"`
}

// Run runs the node until ctx ends, calling ready once leases can be served; it removes every
// container, network and firewall rule it made before returning.
func Run(ctx context.Context, cfg config.Config, deps Deps, log *slog.Logger, ready func(Ready)) (err error) {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return err
	}
	authority, err := ca.LoadOrCreate(cfg.StateDir, cfg.Deployment+" sandbox CA")
	if err != nil {
		return err
	}
	subnet := cfg.Subnet()
	hostIP := subnet.Addr().Next()
	bundle := filepath.Join(cfg.StateDir, "ca-bundle.pem")
	if err := writeBundle(bundle, authority.CertPEM); err != nil {
		return err
	}
	resolvConf := filepath.Join(cfg.StateDir, "resolv.conf")
	if err := os.WriteFile(resolvConf, []byte("nameserver "+hostIP.String()+"\noptions ndots:0 attempts:1 timeout:2\n"), 0o644); err != nil {
		return err
	}

	ropts, err := redis.ParseURL(deps.RedisURL)
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redis at %s does not answer: %w", deps.RedisURL, err)
	}
	store := redisstore.New(rdb, cfg.Deployment+":")

	auditPath := cfg.Audit.Path
	if auditPath == "" {
		auditPath = filepath.Join(cfg.StateDir, "audit.jsonl")
	}
	sink, err := audit.OpenFile(audit.FileConfig{Path: auditPath, FlushEvery: cfg.Audit.FlushEvery})
	if err != nil {
		return err
	}
	defer sink.Close()

	cache := binding.NewCache(cfg.Node, store, cfg.Redis.Grace)
	cctx, stopCache := context.WithCancel(ctx)
	defer stopCache()
	go cache.Run(cctx)

	rt, err := docker.New(docker.Config{
		Node: cfg.Node, Network: cfg.Network.Name, Bridge: cfg.Network.Bridge, Subnet: subnet,
		ProxyURL: "http://" + net.JoinHostPort(hostIP.String(), strconv.Itoa(cfg.Gateway.Port)),
		CABundle: bundle, ResolvConf: resolvConf,
	})
	if err != nil {
		return err
	}
	if err := rt.Ping(ctx); err != nil {
		return err
	}
	keep := cfg.Pool.KeepOnStop
	if !keep {
		// Containers of an earlier run go first: the network cannot be replaced while they use
		// it. A node that keeps its sandboxes adopts them instead (pool.Manager.Reconcile).
		if err := destroyAll(ctx, rt); err != nil {
			return err
		}
	}
	if err := rt.EnsureNetwork(ctx); err != nil {
		return err
	}
	fw := &docker.Firewall{Chain: "AIRLOCK-" + cfg.Node, Bridge: cfg.Network.Bridge, Host: hostIP, Gateway: cfg.Gateway.Port, DNS: cfg.Resolver.Port}
	if err := fw.Apply(); err != nil {
		return fmt.Errorf("host firewall: %w", err)
	}
	if !keep {
		// Kept sandboxes keep their network and stay confined by the firewall while the node
		// is down; otherwise both go.
		defer func() {
			if err := rt.RemoveNetwork(context.WithoutCancel(ctx)); err != nil {
				log.Error("removing sandbox network", "err", err)
			}
			if err := fw.Remove(); err != nil {
				log.Error("removing host firewall rules", "err", err)
			}
		}()
	}

	catalog, err := broker.NewCatalog(cfg.Creds)
	if err != nil {
		return err
	}
	va := cfg.Vault.Auth
	vb, err := vaultbroker.New(vaultbroker.Config{Address: deps.VaultAddr, Token: deps.VaultToken, Auth: vaultbroker.Auth{
		Method: va.Method, RoleIDFile: va.RoleIDFile, SecretIDFile: va.SecretIDFile, SecretIDWrapped: va.SecretIDWrapped, Mount: va.Mount,
		Role: va.Role, JWTFile: va.JWTFile}})
	if err != nil {
		return err
	}
	if err := vb.Login(ctx); err != nil {
		return err
	}
	go vb.Run(ctx, log)
	for name, err := range vb.CheckCatalog(ctx, catalog) {
		// Reported by name; requests needing it get 503, everything else keeps working.
		log.Error("credential cannot be served", "credential", name, "err", err)
	}
	pins, dnsPins, err := privateUpstreams(cfg.Gateway.PrivateUpstreams)
	if err != nil {
		return err
	}
	roots, err := upstreamRoots(cfg.Gateway.UpstreamCAFiles, authority)
	if err != nil {
		return err
	}
	verifier := &token.Verifier{Audience: cfg.Deployment, Issuers: map[string]token.Issuer{}}
	for _, iss := range cfg.Tokens.Issuers {
		ti, err := loadIssuer(iss)
		if err != nil {
			return err
		}
		verifier.Issuers[iss.Name] = ti
	}
	var minter api.Minter
	if deps.DevIssuer != nil {
		maxTTL := time.Duration(0)
		for _, t := range cfg.Templates {
			maxTTL = max(maxTTL, t.MaxTTL)
		}
		verifier.Issuers[deps.DevIssuer.Name] = deps.DevIssuer.Issuer(maxTTL)
		minter = devMinter{deps.DevIssuer}
	}
	// One exfiltration guard for the resolver and the gateway: a name counts once, whichever
	// of them is asked to look it up.
	lim := cfg.Resolver.Tunnel
	guard := exfil.New(exfil.Limits{MaxLabel: lim.MaxLabel, MaxName: lim.MaxName, EntropyBits: lim.EntropyBits,
		MaxDistinct: lim.MaxDistinct, Window: lim.Window})
	apiLn, apiURL, err := listenAPI(cfg)
	if err != nil {
		return err
	}
	nodeAuth, peers, err := nodeTrust(ctx, cfg, store, authority)
	if err != nil {
		return err
	}
	// The pool decides on every use of a task token (a lease, a token swap, a client outside the
	// pool at the gateway), under the catalog the gateway has at that moment.
	var proxy *gateway.Proxy
	mgr, err := pool.New(pool.Config{
		Node: cfg.Node, Templates: cfg.Templates, Runtime: rt, Store: store, Binder: cache, Audit: sink,
		Verify: verifier.VerifyFor, CheckTask: func(t token.Task) error { return checkCredentials(proxy.Catalog(), t) },
		HealthEvery: cfg.Pool.HealthEvery, KeepOnStop: keep, Revoke: vb.Release, Logger: log,
		API: apiURL,
	})
	if err != nil {
		return err
	}
	proxy = gateway.New(gateway.Config{
		Node: cfg.Node, Bindings: cache, CA: authority, Catalog: catalog, Broker: vb, Audit: sink,
		PrivateUpstreams: pins, UpstreamRoots: roots, Logger: log,
		Admit: mgr.AdmitBearer, Verify: verifier.Verify, Budget: cfg.Gateway.Budget, Guard: guard,
	})
	gwAddr := net.JoinHostPort(hostIP.String(), strconv.Itoa(cfg.Gateway.Port))
	gwLn, err := net.Listen("tcp", gwAddr)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gateway.NewMetrics(reg, proxy, authority)
	go proxy.Serve(gwLn)
	defer proxy.Close()

	upstreams := cfg.Resolver.Upstreams
	if len(upstreams) == 0 {
		upstreams = hostNameservers()
	}
	rc := cfg.Resolver
	resolver := dnsfilter.New(dnsfilter.Config{
		Node: cfg.Node, Bindings: cache, Audit: sink, Pins: dnsPins, Upstreams: upstreams, Logger: log,
		NXDomain: rc.NXDomain, CacheMaxTTL: rc.CacheMaxTTL, CacheNegTTL: rc.CacheNegTTL,
		RateQPS: rc.RateQPS, RateBurst: rc.RateBurst,
		Guard: guard,
	})
	dnsfilter.NewMetrics(reg, resolver)
	dnsAddr := net.JoinHostPort(hostIP.String(), strconv.Itoa(cfg.Resolver.Port))
	dnsReady := make(chan struct{})
	dnsErr := make(chan error, 1)
	dctx, stopDNS := context.WithCancel(ctx)
	defer stopDNS()
	go func() { dnsErr <- resolver.Serve(dctx, dnsAddr, func() { close(dnsReady) }) }()
	select {
	case <-dnsReady:
	case err := <-dnsErr:
		return err
	}

	pool.NewMetrics(reg, mgr)
	poolErr := make(chan error, 1)
	pctx, stopPool := context.WithCancel(ctx)
	go func() { poolErr <- mgr.Run(pctx) }()
	// Stop the pool (destroying its sandboxes) before the network and firewall go.
	defer func() { stopPool(); <-poolErr }()

	apiSrv := &http.Server{Handler: api.New(api.Config{Pool: mgr, Keys: apiKeys(cfg, deps), Minter: minter, Logger: log,
		RatePerKey: cfg.API.RatePerKey, BurstPerKey: cfg.API.BurstPerKey, PortHost: apiHost(cfg.API.Listen),
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Explain: proxy.Explain, AuditPath: auditPath, AuditFlush: sink.Flush,
		NodeAuth: nodeAuth, PeerTransport: peers}), ReadHeaderTimeout: 10 * time.Second}
	go apiSrv.Serve(apiLn)
	defer apiSrv.Close()

	go func() {
		for nc := range deps.Reloads {
			if err := reload(nc, proxy, resolver); err != nil {
				log.Error("config reload refused; keeping the running configuration", "err", err)
				continue
			}
			log.Info("config reloaded: credentials, private upstreams and budget")
		}
	}()

	if err := waitLive(ctx, cache); err != nil {
		return err
	}
	if ready != nil {
		ready(Ready{API: apiURL, Warm: mgr.Warm, Gateway: gwAddr, Resolver: dnsAddr, Network: cfg.Network.Name,
			CA: filepath.Join(cfg.StateDir, "ca.pem"), Audit: auditPath})
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-poolErr:
		poolErr <- err
		return fmt.Errorf("pool stopped: %w", err)
	}
}

// listenAPI opens the API's listener (TLS when api.tls is set) and returns the URL other nodes
// and clients reach it at.
func listenAPI(cfg config.Config) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", cfg.API.Listen)
	if err != nil {
		return nil, "", fmt.Errorf("api: %w", err)
	}
	scheme := "http"
	if cfg.API.TLS.Enabled() {
		cert, err := tls.LoadX509KeyPair(cfg.API.TLS.CertFile, cfg.API.TLS.KeyFile)
		if err != nil {
			ln.Close()
			return nil, "", fmt.Errorf("api.tls: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"}})
		scheme = "https"
	}
	u := cfg.API.Advertise
	if u == "" {
		u = scheme + "://" + ln.Addr().String()
	}
	return ln, u, nil
}

// nodeTrust returns what the node signs forwarded calls with and checks other nodes' with (the
// deployment's node secret: from api.node_secret_file, or shared through Redis), and the
// transport it forwards over, which trusts the system roots, api.peer_ca_file and the
// deployment CA.
func nodeTrust(ctx context.Context, cfg config.Config, store *redisstore.Store, authority *ca.Authority) (*api.NodeAuth, http.RoundTripper, error) {
	var secret []byte
	if f := cfg.API.NodeSecretFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("api.node_secret_file: %w", err)
		}
		if secret = []byte(strings.TrimSpace(string(b))); len(secret) < 16 {
			return nil, nil, fmt.Errorf("api.node_secret_file: %s holds fewer than 16 bytes", f)
		}
	} else {
		var err error
		if secret, err = store.NodeSecret(ctx); err != nil {
			return nil, nil, fmt.Errorf("node secret: %w", err)
		}
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	roots.AddCert(authority.Cert)
	if f := cfg.API.PeerCAFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("api.peer_ca_file: %w", err)
		}
		if !roots.AppendCertsFromPEM(b) {
			return nil, nil, fmt.Errorf("api.peer_ca_file: %s holds no PEM certificate", f)
		}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	// HTTP/1.1 between nodes: an HTTP/2 answer may come with a Content-Length where a download
	// declares a trailer (its checksum), which an HTTP/1.1 client of the forwarding node would
	// then never get.
	t.ForceAttemptHTTP2 = false
	return &api.NodeAuth{Node: cfg.Node, Secret: secret}, t, nil
}

func apiHost(listen string) string {
	h, _, _ := net.SplitHostPort(listen)
	return h
}

// apiKeys merges the configured keys with the ones the caller made (the dev key).
func apiKeys(cfg config.Config, deps Deps) map[string]string {
	keys := map[string]string{}
	for _, k := range cfg.API.Keys {
		keys[strings.ToLower(k.SHA256)] = k.Tenant
	}
	for h, t := range deps.APIKeys {
		keys[h] = t
	}
	return keys
}

// reload applies the reloadable part of nc.
func reload(nc config.Config, proxy *gateway.Proxy, resolver *dnsfilter.Resolver) error {
	catalog, err := broker.NewCatalog(nc.Creds)
	if err != nil {
		return err
	}
	pins, dnsPins, err := privateUpstreams(nc.Gateway.PrivateUpstreams)
	if err != nil {
		return err
	}
	proxy.Reload(catalog, pins, nc.Gateway.Budget)
	resolver.SetPins(dnsPins)
	return nil
}

func destroyAll(ctx context.Context, rt *docker.Runtime) error {
	sbs, err := rt.List(ctx)
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		if err := rt.Destroy(ctx, sb.ID); err != nil {
			return err
		}
	}
	return nil
}

// waitLive waits until the binding cache follows the channel, so the first lease is visible.
func waitLive(ctx context.Context, c *binding.Cache) error {
	deadline := time.Now().Add(10 * time.Second)
	for !c.Live() {
		if time.Now().After(deadline) {
			return errors.New("binding channel did not come up within 10s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// writeBundle writes the host's system roots followed by the deployment CA: what sandboxes trust.
func writeBundle(path string, caPEM []byte) error {
	var b []byte
	for _, sys := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"} {
		if s, err := os.ReadFile(sys); err == nil {
			b = append(s, '\n')
			break
		}
	}
	b = append(b, caPEM...)
	return os.WriteFile(path, b, 0o644)
}

func privateUpstreams(ups []config.PrivateUpstream) (map[string]netip.AddrPort, map[string]netip.Addr, error) {
	pins, dns := map[string]netip.AddrPort{}, map[string]netip.Addr{}
	for _, u := range ups {
		h, err := scope.CanonicalHost(u.Host)
		if err != nil {
			return nil, nil, err
		}
		ap, err := netip.ParseAddrPort(u.Address)
		if err != nil {
			return nil, nil, err
		}
		pins[net.JoinHostPort(h, strconv.Itoa(u.Port))] = ap
		dns[h] = ap.Addr()
	}
	return pins, dns, nil
}

func upstreamRoots(files []string, authority *ca.Authority) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	// The dev demo upstream's certificate comes from the deployment CA.
	pool.AddCert(authority.Cert)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("gateway.upstream_ca_files: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("gateway.upstream_ca_files: %s holds no PEM certificate", f)
		}
	}
	return pool, nil
}

// hostNameservers reads the host's resolvers, skipping loopback ones that the host's own stub
// would answer from a namespace sandboxes are not in.
func hostNameservers() []string {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			out = append(out, net.JoinHostPort(f[1], "53"))
		}
	}
	return out
}

func loadIssuer(iss config.Issuer) (token.Issuer, error) {
	ti := token.Issuer{Name: iss.Name, MaxTTL: iss.MaxTTL, Keys: map[string]crypto.PublicKey{}, Tenants: iss.Tenants}
	for kid, path := range iss.Keys {
		b, err := os.ReadFile(path)
		if err != nil {
			return ti, fmt.Errorf("tokens.issuers %s key %s: %w", iss.Name, kid, err)
		}
		k, err := token.ParsePublicKeyPEM(b)
		if err != nil {
			return ti, fmt.Errorf("tokens.issuers %s key %s: %w", iss.Name, kid, err)
		}
		ti.Keys[kid] = k
	}
	return ti, nil
}

// checkCredentials refuses a task whose scopes name a credential the catalog would not send to
// that scope's host for that tenant.
func checkCredentials(c broker.Catalog, t token.Task) error {
	for _, s := range t.Scopes {
		if s.Credential == "" {
			continue
		}
		if s.Host == "" {
			return fmt.Errorf("scope %s names credential %q, but credentials go to names, not address ranges", s, s.Credential)
		}
		if _, err := c.Authorize(s.Credential, s.Host, t.Tenant); err != nil {
			return err
		}
	}
	return nil
}

type devMinter struct{ iss *token.DevIssuer }

func (d devMinter) Mint(tenant string, allow []string, ttl time.Duration) (string, error) {
	scopes := make([]scope.Scope, 0, len(allow))
	for _, a := range allow {
		s, err := scope.ParseAllow(a)
		if err != nil {
			return "", err
		}
		scopes = append(scopes, s)
	}
	return d.iss.Mint("task-"+strconv.FormatInt(time.Now().UnixNano(), 36), tenant, scopes, ttl)
}

// ClientFile is what `airlock up` leaves in the state dir for the CLI.
type ClientFile struct {
	Addr  string `json:"addr"`
	Token string `json:"token"`
	Ready
	VaultAddr  string `json:"vault_addr,omitempty"`
	VaultToken string `json:"vault_token,omitempty"` // dev server root token; dev only
}

// WriteClientFile writes f to dir/client.json, readable by its owner only.
func WriteClientFile(dir string, f ClientFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "client.json"), b, 0o600)
}

// ReadClientFile reads dir/client.json.
func ReadClientFile(dir string) (ClientFile, error) {
	var f ClientFile
	b, err := os.ReadFile(filepath.Join(dir, "client.json"))
	if err != nil {
		return f, err
	}
	return f, json.Unmarshal(b, &f)
}
