package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/mod/sumdb/note"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/receipt"
	"github.com/airlock-dev/airlock/audit/ship"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/e2b"
	"github.com/airlock-dev/airlock/exfil"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/gateway/broker"
	vaultbroker "github.com/airlock-dev/airlock/gateway/broker/vault"
	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/docker"
	"github.com/airlock-dev/airlock/pool/kubernetes"
	"github.com/airlock-dev/airlock/pool/redisstore"
	"github.com/airlock-dev/airlock/review"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/slots"
	"github.com/airlock-dev/airlock/token"
)

// Each part below is one step of Run: it builds one thing from the ones before and returns it,
// with what undoes it where there is something to undo.

// openState makes the state dir and loads (or makes) the deployment CA in it.
func openState(cfg config.Config) (*ca.Authority, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, err
	}
	return ca.LoadOrCreate(cfg.StateDir, cfg.Deployment+" sandbox CA")
}

// openStore connects to Redis, under the deployment's key prefix.
func openStore(ctx context.Context, url, deployment string) (*redisstore.Store, func(), error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("redis at %s does not answer: %w", url, err)
	}
	return redisstore.New(rdb, deployment+":"), func() { rdb.Close() }, nil
}

// CheckpointJournal is the Redis hash holding each node's latest signed audit checkpoint, by
// node name: the copy off the node that `airlock audit verify` compares the trail's tail with.
const CheckpointJournal = "audit-checkpoints"

// auditPart is the node's trail and what signs it.
type auditPart struct {
	sink     *audit.FileSink
	signer   note.Signer
	verifier note.Verifier
	// signed is the seq the latest checkpoint covers.
	signed atomic.Uint64
}

// openAudit opens the audit trail (audit.dir, else audit/ in the state dir) with the node's
// checkpoint key, copying each checkpoint to Redis.
func openAudit(ctx context.Context, cfg config.Config, store *redisstore.Store, log *slog.Logger) (*auditPart, func(), error) {
	signer, vkey, err := audit.LoadSigner(AuditKeyPath(cfg), cfg.Node)
	if err != nil {
		return nil, nil, err
	}
	a := &auditPart{signer: signer}
	if a.verifier, err = audit.NewVerifier(vkey); err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "audit.jsonl")); err == nil {
		log.Warn("audit.jsonl in the state dir is a trail of an earlier version, left as it was: the trail is now segments in " + AuditDir(cfg))
	}
	journal := store.Journal(CheckpointJournal)
	if msg, err := journal.Get(ctx, cfg.Node); err == nil && len(msg) > 0 {
		if c, err := audit.OpenCheckpoint(msg, a.verifier); err == nil {
			a.signed.Store(c.Seq)
		}
	}
	a.sink, err = audit.OpenFile(audit.FileConfig{Dir: AuditDir(cfg), Node: cfg.Node, FlushEvery: cfg.Audit.FlushEvery,
		SegmentBytes: cfg.Audit.SegmentBytes, SegmentAge: cfg.Audit.SegmentAge, KeepFor: cfg.Audit.KeepFor, KeepBytes: cfg.Audit.KeepBytes,
		Signer: signer, Verifier: a.verifier, CheckpointEvery: cfg.Audit.CheckpointEvery,
		OnCheckpoint: func(c audit.Checkpoint) {
			a.signed.Store(c.Seq)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := journal.Put(ctx, cfg.Node, c.Note); err != nil {
				log.Warn("audit checkpoint not copied to redis (the next one will be)", "seq", c.Seq, "err", err)
			}
		}})
	if err != nil {
		return nil, nil, err
	}
	return a, func() { a.sink.Close() }, nil
}

// reviewerKeys are the configured reviewer keys by the hex SHA-256 of the key, as the review
// page and the API's approval endpoints take them.
func reviewerKeys(cfg config.Config) map[string]approval.Reviewer {
	out := map[string]approval.Reviewer{}
	for _, k := range cfg.Review.Reviewers {
		out[strings.ToLower(k.SHA256)] = approval.Reviewer{Name: k.Name, Tenants: k.Tenants}
	}
	return out
}

// startReview serves the review page on its own listener (TLS when review.tls is set), bounded
// as review.connections, review.timeouts and review.calls say, and returns its URL ("" when
// review.listen is empty) and what stops it.
func startReview(cfg config.Config, deps Deps, a *auditPart, approvals *approval.Registry, log *slog.Logger) (string, func(), error) {
	if cfg.Review.Listen == "" {
		return "", func() {}, nil
	}
	dir := AuditDir(cfg)
	page, err := review.New(review.Config{Trail: a.sink, Sink: a.sink, Keys: apiKeys(cfg, deps), Reviewers: reviewerKeys(cfg),
		Secure: cfg.Loaded.ReviewCertificate != nil, SessionTTL: cfg.Review.SessionTTL, Streams: cfg.Review.Streams.Limits(),
		Calls: cfg.Review.Calls.Limits(), Logger: log, Checkpoint: a.signed.Load, Approvals: approvals,
		Verify: func(ctx context.Context, lease string) (*audit.Report, error) {
			if err := a.sink.Flush(ctx); err != nil {
				return nil, err
			}
			return audit.Verify(dir, audit.VerifyOptions{Verifier: a.verifier, Lease: lease})
		}})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", cfg.Review.Listen)
	if err != nil {
		return "", nil, fmt.Errorf("review: %w", err)
	}
	stop := serveBounded(ln, cfg.Loaded.ReviewCertificate, "review", cfg.Review.Connections, cfg.Review.Timeouts, page, page.Refuse)
	return scheme(cfg.Loaded.ReviewCertificate) + "://" + ln.Addr().String(), stop, nil
}

// serveBounded serves h on ln (over TLS with cert when it is set) as package slots bounds it:
// connections per address and in all before anyone is known, and each phase of a connection
// in time; setting names the listener's configuration in refusals ("api"), which refuse
// answers in h's own form. It returns what stops it.
func serveBounded(ln net.Listener, cert *tls.Certificate, setting string, conns config.Connections, t config.Timeouts, h http.Handler,
	refuse func(http.ResponseWriter, *http.Request, string)) func() {
	srv := slots.NewServer(ln, slots.ServerConfig{Handler: h, TLS: serverTLS(cert), Conns: conns.Limits(), Timeouts: t.Slots(),
		Setting: setting, Refuse: refuse})
	go srv.Serve()
	return func() { srv.Close() }
}

// serverTLS is a listener's TLS configuration for cert, offering HTTP/2; nil without one.
func serverTLS(cert *tls.Certificate) *tls.Config {
	if cert == nil {
		return nil
	}
	return &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
}

// scheme is a listener's URL scheme: https when it serves cert.
func scheme(cert *tls.Certificate) string {
	if cert != nil {
		return "https"
	}
	return "http"
}

// startShippers starts a shipper per configured audit sink; the returned function stops them.
func startShippers(ctx context.Context, cfg config.Config, sink *audit.FileSink, reg *prometheus.Registry, log *slog.Logger) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, sc := range cfg.Audit.Sinks {
		sh, err := ship.New(sc, sink, cfg.StateDir, cfg.Node, log)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		reg.MustRegister(sh.Collectors()...)
		wg.Add(1)
		go func() { defer wg.Done(); sh.Run(ctx) }()
	}
	return func() { cancel(); wg.Wait() }, nil
}

// AuditDir is where the node writes its trail.
func AuditDir(cfg config.Config) string {
	if cfg.Audit.Dir != "" {
		return cfg.Audit.Dir
	}
	return filepath.Join(cfg.StateDir, "audit")
}

// AuditKeyPath is the node's checkpoint key; its public half is beside it, with ".pub".
func AuditKeyPath(cfg config.Config) string {
	if cfg.Audit.Key != "" {
		return cfg.Audit.Key
	}
	return filepath.Join(cfg.StateDir, "audit-key")
}

// startBindings starts the cache of this node's lease bindings that the gateway and the
// resolver ask.
func startBindings(ctx context.Context, cfg config.Config, store *redisstore.Store) (*binding.Cache, func()) {
	cache := binding.NewCache(cfg.Node, store, cfg.Redis.Grace)
	cctx, stop := context.WithCancel(ctx)
	go cache.Run(cctx)
	return cache, stop
}

// startBackend sets up where the sandboxes run: the local Docker engine, or Pods on this
// Kubernetes node. The backend is chosen here and nowhere else.
func startBackend(ctx context.Context, cfg config.Config, authority *ca.Authority, log *slog.Logger) (pool.Backend, func(), error) {
	b, err := newBackend(cfg, authority)
	if err != nil {
		return nil, nil, err
	}
	if err := b.Setup(ctx); err != nil {
		return nil, nil, err
	}
	go buildMissing(ctx, cfg.Templates, b, log)
	return b, func() {
		if err := b.Teardown(context.WithoutCancel(ctx)); err != nil {
			log.Error("tearing down the sandbox backend", "err", err)
		}
	}, nil
}

func newBackend(cfg config.Config, authority *ca.Authority) (pool.Backend, error) {
	if cfg.Backend == "kubernetes" {
		k := cfg.Kubernetes
		nodeName := k.NodeName
		if nodeName == "" {
			nodeName = os.Getenv("NODE_NAME")
		}
		// The transparent path needs the connections' original destinations, which only the
		// network namespace that redirected them knows: with the Pod network in another one
		// the redirect is left out (the proxy path and the firewall stay).
		transparent := max(cfg.Gateway.TransparentPort, 0)
		if k.FirewallNetns != "" {
			transparent = 0
		}
		return kubernetes.NewBackend(kubernetes.BackendConfig{
			Node: cfg.Node, NodeName: nodeName, Namespace: k.Namespace, Kubeconfig: k.Kubeconfig,
			HostAddr: addrOrZero(k.HostAddr), PodCIDR: prefixOrZero(k.PodCIDR), FirewallNetns: k.FirewallNetns,
			GatewayPort: cfg.Gateway.Port, ResolverPort: cfg.Resolver.Port, Transparent: transparent,
			NetworkPolicy: k.NetworkPolicy, RuntimeClasses: k.RuntimeClasses, DisableIPv6: k.DisableIPv6,
			CAPEM: authority.CertPEM, KeepOnStop: cfg.Pool.KeepOnStop,
		})
	}
	return docker.NewBackend(docker.BackendConfig{
		Node: cfg.Node, Network: cfg.Network.Name, Bridge: cfg.Network.Bridge, Subnet: cfg.Subnet(),
		GatewayPort: cfg.Gateway.Port, ResolverPort: cfg.Resolver.Port, TransparentPort: max(cfg.Gateway.TransparentPort, 0),
		StateDir: cfg.StateDir, CAPEM: authority.CertPEM, KeepOnStop: cfg.Pool.KeepOnStop, Templates: cfg.Templates,
	})
}

// addrOrZero and prefixOrZero parse what config validated, "" as the zero value (the backend
// then looks it up).
func addrOrZero(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}

func prefixOrZero(s string) netip.Prefix {
	p, _ := netip.ParsePrefix(s)
	return p
}

// buildMissing builds the images of templates made from a Dockerfile or a devcontainer.json
// that the engine lacks, one after another, logging the build; the pool fills each once its
// image is there, and says meanwhile why it cannot (GET /v1/pools).
func buildMissing(ctx context.Context, ts []pool.Template, b pool.Backend, log *slog.Logger) {
	bm, ok := b.(pool.ImageBuilder)
	if !ok {
		return
	}
	for _, t := range ts {
		w := &logLines{log: log.With("template", t.Name)}
		built, err := bm.BuildMissing(ctx, t, w)
		w.Flush()
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("template build failed; its pool stays empty until `airlock template build` succeeds", "template", t.Name, "err", err)
		case built:
			log.Info("template built", "template", t.Name, "image", t.Image)
		}
	}
}

// logLines writes what it is given to the log, a record per line.
type logLines struct {
	log *slog.Logger
	buf []byte
}

func (l *logLines) Write(b []byte) (int, error) {
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		if line := strings.TrimSpace(string(l.buf[:i])); line != "" {
			l.log.Info("template build", "line", line)
		}
		l.buf = l.buf[i+1:]
	}
}

// Flush logs what is left after the last newline.
func (l *logLines) Flush() {
	l.Write([]byte("\n"))
}

// credentials are the catalog and the broker that serves it.
type credentials struct {
	catalog broker.Catalog
	vault   *vaultbroker.Broker
}

// startCredentials logs in to Vault, keeps the login renewed until ctx ends, and reports (by
// name, without stopping) every catalog entry Vault cannot serve: requests needing it get 503,
// everything else works.
// What is minted per lease is kept in the store, under this node's name, until it is revoked: a
// restart revokes what the run before it left.
func startCredentials(ctx context.Context, cfg config.Config, deps Deps, store *redisstore.Store, sink audit.Sink, log *slog.Logger) (credentials, error) {
	catalog, err := broker.NewCatalog(cfg.Creds)
	if err != nil {
		return credentials{}, err
	}
	va := cfg.Vault.Auth
	vb, err := vaultbroker.New(vaultbroker.Config{Address: deps.VaultAddr, Token: deps.VaultToken, Auth: vaultbroker.Auth{
		Method: va.Method, RoleIDFile: va.RoleIDFile, SecretIDFile: va.SecretIDFile, SecretIDWrapped: va.SecretIDWrapped, Mount: va.Mount,
		Role: va.Role, JWTFile: va.JWTFile},
		Journal: store.Journal("minted:" + cfg.Node), Audit: sink, Node: cfg.Node, RetryFor: cfg.Vault.RevokeRetryFor, Logger: log})
	if err != nil {
		return credentials{}, err
	}
	if err := vb.Login(ctx); err != nil {
		return credentials{}, err
	}
	go vb.Run(ctx)
	for name, err := range vb.CheckCatalog(ctx, catalog) {
		log.Error("credential cannot be served", "credential", name, "err", err)
	}
	return credentials{catalog: catalog, vault: vb}, nil
}

// newVerifier trusts the configured issuers and the ones deps adds.
func newVerifier(cfg config.Config, deps Deps) *token.Verifier {
	profiles, _ := cfg.ProfileSet() // config.Validate refused a profile that does not parse
	v := &token.Verifier{Audience: cfg.Deployment, Issuers: cfg.Issuers(), Profiles: profiles}
	for name, iss := range deps.Issuers {
		v.Issuers[name] = iss
	}
	return v
}

// newGuard is the one exfiltration guard of the node: the resolver and the gateway share it, so
// a name counts once whichever of them is asked to look it up.
func newGuard(cfg config.Config) *exfil.Guard {
	t := cfg.Resolver.Tunnel
	return exfil.New(exfil.Limits{MaxLabel: t.MaxLabel, MaxName: t.MaxName, EntropyBits: t.EntropyBits,
		MaxDistinct: t.MaxDistinct, Window: t.Window})
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// cutter is the binding cache as the pool's Binder, with the gateway's Ended as its Cut (nil
// until the gateway is made).
type cutter struct {
	*binding.Cache
	ended func(ctx context.Context, addr netip.Addr)
}

func (c cutter) Cut(ctx context.Context, addr netip.Addr) {
	if c.ended != nil {
		c.ended(ctx, addr)
	}
}

// newPool builds the pool manager; it runs in runPool. catalog returns the catalog in force,
// which lease-time checks apply; ended is the gateway's Ended, which an unbind calls.
func newPool(cfg config.Config, deps Deps, backend pool.Backend, store *redisstore.Store, cache *binding.Cache, sink audit.Sink,
	creds credentials, verifier *token.Verifier, catalog func() broker.Catalog, ended func(context.Context, netip.Addr), apiURL string,
	log *slog.Logger) (*pool.Manager, error) {
	snaps, err := newSnapshots(cfg, creds.vault.Client(), sink, log)
	if err != nil {
		return nil, err
	}
	pc := pool.Config{
		Node: cfg.Node, Templates: cfg.Templates, Runtime: backend, Store: store, Binder: cutter{Cache: cache, ended: ended}, Audit: sink,
		Verify: verifier.VerifyFor, CheckTask: func(t token.Task) error { return checkCredentials(catalog(), t) },
		HealthEvery: cfg.Pool.HealthEvery, RefillParallel: cfg.Pool.RefillParallel, MemoryBudgetMB: memoryBudget(cfg.Pool.MemoryBudgetMB, log),
		KeepOnStop: cfg.Pool.KeepOnStop, Release: creds.vault.Release, Revoke: creds.vault.Revoke, Logger: log,
		API: apiURL, OutputHead: cfg.Audit.OutputHead,
		Redact:  func(lease, text string) string { return broker.Redact(text, creds.vault.Values(lease)...) },
		Tenants: func() []string { return tenantsOf(apiKeys(cfg, deps)) },
		Scratch: filepath.Join(cfg.StateDir, "checkpoints"),
	}
	if snaps != nil {
		pc.Snapshots = snaps
	}
	return pool.New(pc)
}

// memoryBudget is the node's memory budget for its sandboxes: the one configured, else the
// host's physical memory (0, no budget, where it cannot be read).
func memoryBudget(configured int64, log *slog.Logger) int64 {
	if configured > 0 {
		return configured
	}
	mb, err := hostMemoryMB()
	if err != nil {
		log.Warn("the host's memory is unknown, so the sandboxes have no memory budget; set pool.memory_budget_mb", "err", err)
		return 0
	}
	return mb
}

// hostMemoryMB reads MemTotal from /proc/meminfo, in MiB.
func hostMemoryMB() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: MemTotal %q: %w", strings.TrimSpace(rest), err)
			}
			return kb >> 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemTotal")
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

// gatewayPart is the running gateway.
type gatewayPart struct {
	proxy *gateway.Proxy
	addr  string
	close func()
}

// startGateway serves the gateway on the backend's host address.
func startGateway(cfg config.Config, backend pool.Backend, authority *ca.Authority, cache *binding.Cache, sink audit.Sink,
	creds credentials, verifier *token.Verifier, mgr *pool.Manager, guard *exfil.Guard, approvals *approval.Registry,
	reg prometheus.Registerer, log *slog.Logger) (*gatewayPart, error) {
	pins, err := privateUpstreams(cfg.Gateway.PrivateUpstreams)
	if err != nil {
		return nil, err
	}
	mirrored, err := mirrors(cfg.Gateway.Mirrors)
	if err != nil {
		return nil, err
	}
	proxy := gateway.New(gateway.Config{
		Node: cfg.Node, Bindings: cache, CA: authority, Catalog: creds.catalog, Broker: creds.vault, Audit: sink, Approvals: approvals,
		PrivateUpstreams: pins, Mirrors: mirrored, UpstreamRoots: roots(authority, cfg.Loaded.UpstreamCAs), Logger: log,
		Admit: mgr.AdmitBearer, Verify: verifier.Verify, Budget: cfg.Gateway.Budget, Guard: guard,
	})
	addr := net.JoinHostPort(backend.HostAddr().String(), strconv.Itoa(cfg.Gateway.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	gateway.NewMetrics(reg, proxy, authority)
	go proxy.Serve(ln)
	closeAll := func() { proxy.Close() }
	if tp := cfg.Gateway.TransparentPort; tp > 0 {
		tln, err := net.Listen("tcp", net.JoinHostPort(backend.HostAddr().String(), strconv.Itoa(tp)))
		if err != nil {
			proxy.Close()
			return nil, fmt.Errorf("gateway, port for redirected connections: %w", err)
		}
		go proxy.ServeTransparent(tln, gateway.OriginalDst)
		closeAll = func() { tln.Close(); proxy.Close() }
	}
	return &gatewayPart{proxy: proxy, addr: addr, close: closeAll}, nil
}

// resolverPart is the running resolver.
type resolverPart struct {
	resolver *dnsfilter.Resolver
	via      netip.Addr // what pinned names answer with (see pinnedNames)
	addr     string
	close    func()
}

// startResolver serves the filtering resolver on the backend's host address, once it listens.
func startResolver(ctx context.Context, cfg config.Config, backend pool.Backend, cache *binding.Cache, sink audit.Sink,
	guard *exfil.Guard, reg prometheus.Registerer, log *slog.Logger) (*resolverPart, error) {
	// Sandboxes are told a pinned name is at the gateway, when the redirect is on: the pinned
	// address itself (often the host's loopback) means nothing inside a sandbox.
	var via netip.Addr
	if cfg.Gateway.TransparentPort > 0 {
		via = backend.HostAddr()
	}
	dnsPins := pinnedNames(cfg.Gateway.PrivateUpstreams, via)
	rc := cfg.Resolver
	r := dnsfilter.New(dnsfilter.Config{
		Node: cfg.Node, Bindings: cache, Audit: sink, Pins: dnsPins, Upstreams: cfg.Loaded.Resolvers, Logger: log,
		NXDomain: rc.NXDomain, CacheMaxTTL: rc.CacheMaxTTL, CacheNegTTL: rc.CacheNegTTL,
		RateQPS: rc.RateQPS, RateBurst: rc.RateBurst, Guard: guard,
	})
	dnsfilter.NewMetrics(reg, r)
	addr := net.JoinHostPort(backend.HostAddr().String(), strconv.Itoa(cfg.Resolver.Port))
	ready, errc := make(chan struct{}), make(chan error, 1)
	dctx, stop := context.WithCancel(ctx)
	go func() { errc <- r.Serve(dctx, addr, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-errc:
		stop()
		return nil, err
	}
	return &resolverPart{resolver: r, via: via, addr: addr, close: func() { stop(); <-errc }}, nil
}

// runPool runs the pool until stop, which waits for it to end (destroying the node's sandboxes
// unless they are kept); errc reports a pool that stopped by itself.
func runPool(ctx context.Context, mgr *pool.Manager, reg prometheus.Registerer) (errc <-chan error, stop func()) {
	pool.NewMetrics(reg, mgr)
	out, done := make(chan error, 1), make(chan struct{})
	pctx, cancel := context.WithCancel(ctx)
	go func() {
		err := mgr.Run(pctx)
		if err != nil {
			out <- err
		}
		close(done)
	}()
	return out, func() { cancel(); <-done }
}

// newApprovals is the registry of requests the gateway holds for reviewers, telling the
// configured webhook of each new one.
func newApprovals(cfg config.Config, sink audit.Sink, mgr *pool.Manager, log *slog.Logger) *approval.Registry {
	a := cfg.Gateway.Approvals
	var notify func(approval.Approval)
	if a.Webhook != "" {
		notify = approval.Webhook(a.Webhook, cfg.Node, &http.Client{Timeout: 5 * time.Second}, log)
	}
	return approval.New(approval.Config{Hold: a.Hold, TTL: a.TTL, Node: cfg.Node, Audit: sink, Notify: notify, AllowSelf: a.AllowSelf,
		LeaseKey: func(ctx context.Context, tenant, lease string) (string, error) {
			l, err := mgr.Get(ctx, tenant, lease)
			return l.Key, err
		}})
}

// apiPart is the running API: its handler (which the E2B listener calls in process) and the
// node secret it signs forwarded calls with.
type apiPart struct {
	handler http.Handler
	secret  []byte
	close   func()
}

// startAPI serves the API on ln (TLS when api.tls is set), bounded as api.connections,
// api.timeouts, api.calls and api.streams say, forwarding calls about other nodes' leases,
// signed.
func startAPI(ctx context.Context, cfg config.Config, deps Deps, ln net.Listener, mgr *pool.Manager, store *redisstore.Store,
	authority *ca.Authority, gw *gatewayPart, sink *audit.FileSink, signer note.Signer, approvals *approval.Registry,
	reg *prometheus.Registry, log *slog.Logger) (*apiPart, error) {
	nodeAuth, peers, err := nodeTrust(ctx, cfg, store, authority)
	if err != nil {
		ln.Close()
		return nil, err
	}
	h := api.New(api.Config{Pool: mgr, Keys: apiKeys(cfg, deps), Minter: deps.Minter, Logger: log,
		RatePerKey: cfg.API.RatePerKey, BurstPerKey: cfg.API.BurstPerKey, PortHost: apiHost(cfg.API.Listen),
		MaxPortsPerLease: cfg.API.MaxPortsPerLease, Streams: cfg.API.Streams.Limits(), Calls: cfg.API.Calls.Limits(),
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Explain: gw.proxy.Explain, Audit: sink,
		Receipt: func(ctx context.Context, tenant, lease string) ([]byte, error) {
			return receipt.Make(ctx, sink, signer, tenant, lease)
		},
		Approvals: approvals, Reviewers: reviewerKeys(cfg),
		NodeAuth: nodeAuth, PeerTransport: peers})
	stop := serveBounded(ln, cfg.Loaded.APICertificate, "api", cfg.API.Connections, cfg.API.Timeouts, h, h.Refuse)
	return &apiPart{handler: h, secret: nodeAuth.Secret, close: stop}, nil
}

// startE2B serves E2B's API on its own listener (TLS when e2b.tls is set), bounded as
// e2b.connections and e2b.timeouts say, and returns its URL ("" when e2b.listen is empty) and
// what stops it.
func startE2B(cfg config.Config, a *apiPart, mgr *pool.Manager, log *slog.Logger) (string, func(), error) {
	if cfg.E2B.Listen == "" {
		return "", func() {}, nil
	}
	h, err := e2b.New(e2b.Config{API: a.handler, Template: mgr.Template, Secret: a.secret, Node: cfg.Node,
		Domain: cfg.E2B.Domain, Logger: log})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", cfg.E2B.Listen)
	if err != nil {
		return "", nil, fmt.Errorf("e2b: %w", err)
	}
	url := scheme(cfg.Loaded.E2BCertificate) + "://" + ln.Addr().String()
	return url, serveBounded(ln, cfg.Loaded.E2BCertificate, "e2b", cfg.E2B.Connections, cfg.E2B.Timeouts, h, h.Refuse), nil
}

// followReloads applies each configuration deps delivers: the credential catalog, the private
// upstreams and the budget change while connections stay open.
func followReloads(reloads <-chan config.Config, gw *gatewayPart, res *resolverPart, log *slog.Logger) {
	for nc := range reloads {
		catalog, err := broker.NewCatalog(nc.Creds)
		if err == nil {
			var pins map[string]netip.AddrPort
			var mirrored map[string]gateway.Mirror
			if pins, err = privateUpstreams(nc.Gateway.PrivateUpstreams); err == nil {
				if mirrored, err = mirrors(nc.Gateway.Mirrors); err == nil {
					gw.proxy.Reload(catalog, pins, mirrored, nc.Gateway.Budget)
					res.resolver.SetPins(pinnedNames(nc.Gateway.PrivateUpstreams, res.via))
					log.Info("config reloaded: credentials, private upstreams, mirrors and budget")
					continue
				}
			}
		}
		log.Error("config reload refused; keeping the running configuration", "err", err)
	}
}

// listenAPI opens the API's listener and returns the URL other nodes and clients reach it at
// (https when api.tls is set: startAPI serves TLS on it, inside the connection bounds).
func listenAPI(cfg config.Config) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", cfg.API.Listen)
	if err != nil {
		return nil, "", fmt.Errorf("api: %w", err)
	}
	u := cfg.API.Advertise
	if u == "" {
		u = scheme(cfg.Loaded.APICertificate) + "://" + ln.Addr().String()
	}
	return ln, u, nil
}

// nodeTrust returns what the node signs forwarded calls with and checks other nodes' with (the
// deployment's node secret: from api.node_secret_file, or shared through Redis), and the
// transport it forwards over, which trusts the system roots, api.peer_ca_file and the
// deployment CA.
func nodeTrust(ctx context.Context, cfg config.Config, store *redisstore.Store, authority *ca.Authority) (*api.NodeAuth, http.RoundTripper, error) {
	secret := cfg.Loaded.NodeSecret
	if secret == nil {
		var err error
		if secret, err = store.NodeSecret(ctx); err != nil {
			return nil, nil, fmt.Errorf("node secret: %w", err)
		}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: roots(authority, cfg.Loaded.PeerCAs), MinVersion: tls.VersionTLS12}
	// HTTP/1.1 between nodes: an HTTP/2 answer may come with a Content-Length where a download
	// declares a trailer (its checksum), which an HTTP/1.1 client of the forwarding node would
	// then never get.
	t.ForceAttemptHTTP2 = false
	return &api.NodeAuth{Node: cfg.Node, Secret: secret}, t, nil
}

// roots is the system's roots, the deployment CA (the dev demo upstream's certificate comes from
// it) and extra.
func roots(authority *ca.Authority, extra []*x509.Certificate) *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pool.AddCert(authority.Cert)
	for _, c := range extra {
		pool.AddCert(c)
	}
	return pool
}

func apiHost(listen string) string {
	h, _, _ := net.SplitHostPort(listen)
	return h
}

// apiKeys merges the configured keys with the ones deps brings (the dev key).
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

// privateUpstreams are the gateway's pins: "host:port" to the one address it may dial.
func privateUpstreams(ups []config.PrivateUpstream) (map[string]netip.AddrPort, error) {
	pins := map[string]netip.AddrPort{}
	for _, u := range ups {
		h, err := scope.CanonicalHost(u.Host)
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(u.Address)
		if err != nil {
			return nil, err
		}
		pins[net.JoinHostPort(h, strconv.Itoa(u.Port))] = ap
	}
	return pins, nil
}

// mirrors is the gateway's mirror table from the configuration's.
func mirrors(ms []config.Mirror) (map[string]gateway.Mirror, error) {
	out := map[string]gateway.Mirror{}
	for i, m := range ms {
		t, err := m.Target()
		if err != nil {
			return nil, fmt.Errorf("gateway.mirrors[%d]: %w", i, err)
		}
		out[t.Key] = gateway.Mirror{Scheme: t.Scheme, Host: t.Host, Port: t.Port}
	}
	return out, nil
}

// pinnedNames are the resolver's pins: each private upstream's name to its address.
// With via valid, every pinned name answers with via instead: the gateway's own address, where a
// client that ignores the proxy is redirected to the gateway, which dials the pin.
func pinnedNames(ups []config.PrivateUpstream, via netip.Addr) map[string]netip.Addr {
	names := map[string]netip.Addr{}
	for _, u := range ups {
		h, err := scope.CanonicalHost(u.Host)
		ap, aerr := netip.ParseAddrPort(u.Address)
		if err != nil || aerr != nil {
			continue // privateUpstreams reports it; config.Validate refused it already
		}
		names[h] = ap.Addr()
		if via.IsValid() {
			names[h] = via
		}
	}
	return names
}

// LatestCheckpoint reads the node's latest audit checkpoint from Redis (nil when it has none).
func LatestCheckpoint(ctx context.Context, redisURL, deployment, nodeName string) ([]byte, error) {
	store, closeStore, err := openStore(ctx, redisURL, deployment)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	return store.Journal(CheckpointJournal).Get(ctx, nodeName)
}
