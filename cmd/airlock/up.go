package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/devstack"
	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/node"
	"github.com/airlock-dev/airlock/pool/api"
	"github.com/airlock-dev/airlock/token"
)

func cmdUp(args []string) int {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML configuration (default: embedded defaults)")
	debug := fs.Bool("debug", false, "log debug records")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return fail(err)
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := up(ctx, cfg, *cfgPath, log); err != nil {
		return fail(err)
	}
	fmt.Fprintln(os.Stderr, "airlock: stopped; containers, network, firewall rules and child processes removed")
	return 0
}

func up(ctx context.Context, cfg config.Config, cfgPath string, log *slog.Logger) error {
	if cfg.StateDir == "" {
		cfg.StateDir = stateDir()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDir(cfg.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	// A client file left by a crashed run would point the CLI at nothing.
	os.Remove(filepath.Join(cfg.StateDir, "client.json"))
	defer os.Remove(filepath.Join(cfg.StateDir, "client.json"))

	// The dev services outlive the signal: the node still needs Redis and Vault while it cleans
	// up after Ctrl-C, and the deferred Stops end them once it has. (They also die with this
	// process if it is killed.)
	svcCtx := context.WithoutCancel(ctx)
	deps := node.Deps{RedisURL: firstOf(os.Getenv("REDIS_URL"), cfg.Redis.URL)}
	if deps.RedisURL == "" {
		r, err := devstack.StartRedis(svcCtx, filepath.Join(cfg.StateDir, "redis"))
		if err != nil {
			return err
		}
		defer r.Stop()
		deps.RedisURL = r.URL
	}

	deps.VaultAddr = firstOf(os.Getenv("VAULT_ADDR"), cfg.Vault.Address)
	var demoSecret string
	if deps.VaultAddr == "" {
		bin, err := devstack.FindVault(cfg.Vault.Binary)
		if err != nil {
			return err
		}
		v, err := devstack.StartVault(svcCtx, bin, filepath.Join(cfg.StateDir, "vault"))
		if err != nil {
			return err
		}
		defer v.Stop()
		demoSecret = devstack.RandomSecret("demo-")
		if err := v.SeedKV(ctx, "airlock/demo", map[string]any{"token": demoSecret}); err != nil {
			return fmt.Errorf("seeding the dev vault: %w", err)
		}
		if err := v.SeedTaskRole(ctx); err != nil {
			return fmt.Errorf("seeding the dev vault: %w", err)
		}
		deps.VaultAddr, deps.VaultToken = v.Addr, v.Token
	} else {
		deps.VaultToken = os.Getenv("VAULT_TOKEN")
		if deps.VaultToken == "" && cfg.Vault.TokenFile != "" {
			b, err := os.ReadFile(cfg.Vault.TokenFile)
			if err != nil {
				return fmt.Errorf("vault.token_file: %w", err)
			}
			deps.VaultToken = strings.TrimSpace(string(b))
		}
		if m := cfg.Vault.Auth.Method; deps.VaultToken == "" && (m == "" || m == "token") {
			return errors.New("vault: VAULT_ADDR is set but no token (VAULT_TOKEN, vault.token_file, or vault.auth approle)")
		}
	}

	if cfg.Dev.Issuer {
		iss, err := token.NewDevIssuer("airlock-dev", cfg.Deployment)
		if err != nil {
			return err
		}
		deps.DevIssuer = iss
	}
	apiKey := devstack.RandomSecret("ak-")
	deps.APIKeys = map[string]string{api.HashKey(apiKey): "dev"}

	if cfg.Dev.DemoUpstream != "" && demoSecret != "" {
		authority, err := ca.LoadOrCreate(cfg.StateDir, cfg.Deployment+" sandbox CA")
		if err != nil {
			return err
		}
		leaf, err := authority.Leaf(config.DemoHost)
		if err != nil {
			return err
		}
		demo, err := devstack.StartDemo(ctx, cfg.Dev.DemoUpstream, leaf, func() string { return demoSecret })
		if err != nil {
			return err
		}
		cfg.Gateway.PrivateUpstreams = append(cfg.Gateway.PrivateUpstreams,
			config.PrivateUpstream{Host: config.DemoHost, Port: 443, Address: demo.Addr})
	}
	deps.Reloads = watchReloads(ctx, cfgPath, cfg, log)

	return node.Run(ctx, cfg, deps, log, func(r node.Ready) {
		err := node.WriteClientFile(cfg.StateDir, node.ClientFile{Addr: r.API, Token: apiKey, Ready: r,
			VaultAddr: deps.VaultAddr, VaultToken: devOnly(deps.VaultToken, demoSecret != "")})
		if err != nil {
			log.Error("writing client file", "err", err)
		}
		waitWarm(ctx, r.Warm)
		fmt.Fprintf(os.Stderr, `
airlock is up: node %s
  API       %s  (key and addresses in %s)
  gateway   %s    resolver %s    network %s
  CA        %s
  audit     %s
  redis     %s
  vault     %s

%s
Ctrl-C stops airlock and removes everything it made.
`, cfg.Node, r.API, filepath.Join(cfg.StateDir, "client.json"), r.Gateway, r.Resolver, r.Network, r.CA, r.Audit, deps.RedisURL, deps.VaultAddr,
			devIssuerNote(cfg.Dev.Issuer))
	})
}

// waitWarm waits (bounded) until every pool is warm, so the example works at once.
func waitWarm(ctx context.Context, warm func(context.Context) (bool, string)) {
	fmt.Fprint(os.Stderr, "airlock: warming the pool")
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if ok, _ := warm(ctx); ok {
			fmt.Fprintln(os.Stderr, " done")
			return
		}
		fmt.Fprint(os.Stderr, ".")
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	_, why := warm(ctx)
	fmt.Fprintf(os.Stderr, " not yet warm (%s); leases may wait\n", why)
}

// devIssuerNote is the banner's word on the dev issuer.
func devIssuerNote(on bool) string {
	if on {
		return "  dev issuer ON: every API key can mint task tokens with any scope (lease --allow).\n" +
			"  These are the embedded dev defaults; a --config file turns it on only with dev.issuer: true.\n\n" +
			"Try it (api.example.test is a local demo upstream that checks the injected credential):\n" +
			"  id=$(airlock lease --allow api.example.test=demo)\n" +
			"  airlock exec $id -- curl -sS https://api.example.test/whoami\n"
	}
	return "  dev issuer off: leases need a task token from a configured issuer (airlock lease --token).\n"
}

func devOnly(tok string, dev bool) string {
	if dev {
		return tok
	}
	return ""
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// lockDir takes an exclusive lock on dir so two nodes never share one state dir.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another airlock node is running with state dir %s", dir)
	}
	return func() { f.Close() }, nil
}

// watchReloads re-reads the config file on SIGHUP and delivers each valid one; an invalid file
// is reported and the running configuration stays.
func watchReloads(ctx context.Context, path string, running config.Config, log *slog.Logger) <-chan config.Config {
	out := make(chan config.Config)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			nc, err := config.Load(path)
			if err != nil {
				log.Error("config reload refused; keeping the running configuration", "err", err)
				continue
			}
			// What `airlock up` added itself (the demo upstream's pin) stays.
			for _, u := range running.Gateway.PrivateUpstreams {
				if u.Host == config.DemoHost && running.Dev.DemoUpstream != "" {
					nc.Gateway.PrivateUpstreams = append(nc.Gateway.PrivateUpstreams, u)
				}
			}
			select {
			case out <- nc:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
