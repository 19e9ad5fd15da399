package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit/auditmetrics"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/token"
)

// Deps are the services the node talks to, already resolved (external, or started by the dev
// stack).
type Deps struct {
	RedisURL   string
	VaultAddr  string
	VaultToken string
	// APIKeys maps hashed API keys to tenants (see api.HashKey), beside the configured ones.
	APIKeys map[string]string
	// Issuers are trusted beside the configured ones (the dev stack's dev issuer).
	Issuers map[string]token.Issuer
	// Minter mints task tokens for --allow leases; nil means leases need a token.
	Minter api.Minter
	// Reloads delivers validated configurations to apply while running: the credential
	// catalog, private upstreams and gateway budget change; open connections stay open.
	// Other fields take effect at the next start.
	Reloads <-chan config.Config
}

// Ready describes a running node, for what `airlock up` prints and the client file.
type Ready struct {
	Node       string `json:"node"`
	Deployment string `json:"deployment"`
	API        string `json:"api"`
	Gateway    string `json:"gateway"`
	Resolver   string `json:"resolver"`
	Network    string `json:"network"`
	CA         string `json:"ca"`
	Audit      string `json:"audit"`            // the trail's directory
	AuditKey   string `json:"audit_key"`        // the public key its checkpoints verify with
	Review     string `json:"review,omitempty"` // the review page's URL, when it serves one
	E2B        string `json:"e2b,omitempty"`    // the E2B listener's URL, when it serves one
	// Warm reports, without a call to the API, whether every template's pool holds its
	// min_warm sandboxes, and if not which one lags.
	Warm func(context.Context) (bool, string) `json:"-"`
}

// Run assembles the node from its parts, in the order each needs the ones before, serves until
// ctx ends, and takes the parts down in reverse order: the API first, the pool (which destroys
// its sandboxes) before the backend's network and firewall go, the store last. It calls ready
// once leases can be served.
func Run(ctx context.Context, cfg config.Config, deps Deps, log *slog.Logger, ready func(Ready)) error {
	authority, err := openState(cfg)
	if err != nil {
		return err
	}
	store, closeStore, err := openStore(ctx, deps.RedisURL, cfg.Deployment)
	if err != nil {
		return err
	}
	defer closeStore()
	trail, closeAudit, err := openAudit(ctx, cfg, store, log)
	if err != nil {
		return err
	}
	defer closeAudit()
	sink := trail.sink
	cache, stopBindings := startBindings(ctx, cfg, store)
	defer stopBindings()
	backend, closeBackend, err := startBackend(ctx, cfg, authority, log)
	if err != nil {
		return err
	}
	defer closeBackend()
	creds, err := startCredentials(ctx, cfg, deps, store, sink, log)
	if err != nil {
		return err
	}
	verifier := newVerifier(cfg, deps)
	apiLn, apiURL, err := listenAPI(cfg)
	if err != nil {
		return err
	}
	reg := newRegistry()
	reg.MustRegister(creds.vault.Collectors()...)
	reg.MustRegister(auditmetrics.Collectors(sink)...)
	stopShippers, err := startShippers(ctx, cfg, sink, reg, log)
	if err != nil {
		apiLn.Close()
		return err
	}
	defer stopShippers()
	// The pool decides on every use of a task token (a lease, a token swap, a client outside the
	// pool at the gateway), under the catalog the gateway has at that moment.
	var gw *gatewayPart
	mgr, err := newPool(cfg, deps, backend, store, cache, sink, creds, verifier, func() broker.Catalog { return gw.proxy.Catalog() },
		func(ctx context.Context, a netip.Addr) {
			if gw != nil {
				gw.proxy.Ended(ctx, a)
			}
		}, apiURL, log)
	if err != nil {
		apiLn.Close()
		return err
	}
	guard := newGuard(cfg)
	approvals := newApprovals(cfg, sink, mgr, log)
	if gw, err = startGateway(cfg, backend, authority, cache, sink, creds, verifier, mgr, guard, approvals, reg, log); err != nil {
		apiLn.Close()
		return err
	}
	defer gw.close()
	res, err := startResolver(ctx, cfg, backend, cache, sink, guard, reg, log)
	if err != nil {
		apiLn.Close()
		return err
	}
	defer res.close()
	poolErr, stopPool := runPool(ctx, mgr, reg)
	defer stopPool()
	apiPart, err := startAPI(ctx, cfg, deps, apiLn, mgr, store, authority, gw, sink, trail.signer, approvals, reg, log)
	if err != nil {
		return err
	}
	defer apiPart.close()
	reviewURL, closeReview, err := startReview(cfg, deps, trail, approvals, log)
	if err != nil {
		return err
	}
	defer closeReview()
	e2bURL, closeE2B, err := startE2B(cfg, apiPart, mgr, log)
	if err != nil {
		return err
	}
	defer closeE2B()
	go followReloads(deps.Reloads, gw, res, log)

	if err := waitLive(ctx, cache); err != nil {
		return err
	}
	if ready != nil {
		ready(Ready{Node: cfg.Node, Deployment: cfg.Deployment, API: apiURL, Warm: mgr.Warm, Gateway: gw.addr, Resolver: res.addr, Network: cfg.Network.Name,
			CA: filepath.Join(cfg.StateDir, "ca.pem"), Audit: sink.Dir(), AuditKey: AuditKeyPath(cfg) + ".pub", Review: reviewURL,
			E2B: e2bURL})
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-poolErr:
		return fmt.Errorf("pool stopped: %w", err)
	}
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
