package devstack

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

// Stack is what `airlock up` runs around a node: the dev services it started (Redis, a Vault dev
// server seeded with the demo credential, the demo upstream), the dev issuer and a dev API key.
// Its fields are what a node.Deps needs.
type Stack struct {
	RedisURL  string
	VaultAddr string
	// VaultToken is the token the node logs in to Vault with: the dev server's root token when
	// the stack runs Vault (DevVault), else VAULT_TOKEN or vault.token_file's.
	VaultToken string
	DevVault   bool
	// APIKey is the dev key, of tenant "dev"; APIKeys holds its hash.
	APIKey  string
	APIKeys map[string]string
	// Issuers holds the dev issuer, and Minter mints with it, when dev.issuer is on.
	Issuers map[string]token.Issuer
	Minter  api.Minter
	stops   []func()
}

// Start starts what cfg leaves to the dev stack and returns it; env reads the environment.
// Redis runs unless REDIS_URL or redis.url names one; Vault runs (seeded) unless VAULT_ADDR or
// vault.address does, in which case the token is VAULT_TOKEN or vault.token_file's; the dev
// issuer is made when dev.issuer is on; the demo upstream runs, and is pinned in cfg, when
// dev.demo_upstream is set and the dev Vault holds its secret.
//
// The services outlive ctx's cancellation: the node still needs Redis and Vault while it cleans
// up after Ctrl-C, and Stop ends them once it has. (They also die with this process.)
func Start(ctx context.Context, cfg *config.Config, env func(string) string) (st *Stack, err error) {
	s := &Stack{APIKey: RandomSecret("ak-")}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	svc := context.WithoutCancel(ctx)
	s.RedisURL = firstOf(env("REDIS_URL"), cfg.Redis.URL)
	if s.RedisURL == "" {
		r, err := StartRedis(svc, filepath.Join(cfg.StateDir, "redis"))
		if err != nil {
			return nil, err
		}
		s.stops = append(s.stops, r.Stop)
		s.RedisURL = r.URL
	}

	s.VaultAddr = firstOf(env("VAULT_ADDR"), cfg.Vault.Address)
	var demoSecret string
	if s.VaultAddr == "" {
		bin, err := FindVault(cfg.Vault.Binary)
		if err != nil {
			return nil, err
		}
		v, err := StartVault(svc, bin, filepath.Join(cfg.StateDir, "vault"))
		if err != nil {
			return nil, err
		}
		s.stops = append(s.stops, v.Stop)
		demoSecret = RandomSecret("demo-")
		if err := v.SeedKV(ctx, "airlock/demo", map[string]any{"token": demoSecret}); err != nil {
			return nil, fmt.Errorf("seeding the dev vault: %w", err)
		}
		if err := v.SeedTaskRole(ctx); err != nil {
			return nil, fmt.Errorf("seeding the dev vault: %w", err)
		}
		s.VaultAddr, s.VaultToken, s.DevVault = v.Addr, v.Token, true
	} else {
		s.VaultToken = firstOf(env("VAULT_TOKEN"), cfg.Loaded.VaultToken)
		if m := cfg.Vault.Auth.Method; s.VaultToken == "" && (m == "" || m == "token") {
			return nil, errors.New("vault: VAULT_ADDR is set but no token (VAULT_TOKEN, vault.token_file, or vault.auth approle)")
		}
	}

	if cfg.Dev.Issuer {
		iss, err := token.NewDevIssuer("airlock-dev", cfg.Deployment)
		if err != nil {
			return nil, err
		}
		maxTTL := time.Duration(0)
		for _, t := range cfg.Templates {
			maxTTL = max(maxTTL, t.MaxTTL)
		}
		s.Issuers = map[string]token.Issuer{iss.Name: iss.Issuer(maxTTL)}
		s.Minter = minter{iss}
	}
	s.APIKeys = map[string]string{api.HashKey(s.APIKey): "dev"}

	if cfg.Dev.DemoUpstream != "" && demoSecret != "" {
		authority, err := ca.LoadOrCreate(cfg.StateDir, cfg.Deployment+" sandbox CA")
		if err != nil {
			return nil, err
		}
		leaf, err := authority.Leaf(config.DemoHost)
		if err != nil {
			return nil, err
		}
		demo, err := StartDemo(ctx, cfg.Dev.DemoUpstream, leaf, func() string { return demoSecret })
		if err != nil {
			return nil, err
		}
		cfg.Gateway.PrivateUpstreams = append(cfg.Gateway.PrivateUpstreams,
			config.PrivateUpstream{Host: config.DemoHost, Port: 443, Address: demo.Addr})
	}
	return s, nil
}

// Stop ends the services the stack started, the last started first.
func (s *Stack) Stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

// minter mints dev task tokens from "HOST[:PORT][=CREDENTIAL]" specs, and "@PROFILE" for a
// profile.
type minter struct{ iss *token.DevIssuer }

func (d minter) Mint(tenant, task string, allow []string, ttl time.Duration) (string, error) {
	scopes := make([]scope.Scope, 0, len(allow))
	var profiles []string
	for _, a := range allow {
		if name, ok := strings.CutPrefix(a, "@"); ok {
			profiles = append(profiles, name)
			continue
		}
		s, err := scope.ParseAllow(a)
		if err != nil {
			return "", err
		}
		scopes = append(scopes, s)
	}
	if task == "" {
		task = "task-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return d.iss.MintWith(task, tenant, scopes, profiles, ttl)
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
