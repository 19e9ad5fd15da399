package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/cmd/internal/cli"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/node"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/docker"
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
	if *cfgPath == "" {
		cfg.Templates = engineCanRun(ctx, cfg.Templates)
	}
	if err := up(ctx, cfg, *cfgPath, log); err != nil {
		return fail(err)
	}
	fmt.Fprintln(os.Stderr, "airlock: stopped; containers, network, firewall rules and child processes removed")
	return 0
}

func up(ctx context.Context, cfg config.Config, cfgPath string, log *slog.Logger) error {
	if cfg.StateDir == "" {
		cfg.StateDir = cli.StateDir()
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

	stack, err := devstack.Start(ctx, &cfg, os.Getenv)
	if err != nil {
		return err
	}
	defer stack.Stop()
	deps := node.Deps{RedisURL: stack.RedisURL, VaultAddr: stack.VaultAddr, VaultToken: stack.VaultToken,
		APIKeys: stack.APIKeys, Issuers: stack.Issuers, Minter: stack.Minter}
	deps.Reloads = watchReloads(ctx, cfgPath, cfg, log)

	return node.Run(ctx, cfg, deps, log, func(r node.Ready) {
		err := node.WriteClientFile(cfg.StateDir, node.ClientFile{Addr: r.API, Token: stack.APIKey, Ready: r,
			VaultAddr: deps.VaultAddr, VaultToken: devOnly(deps.VaultToken, stack.DevVault), RedisURL: deps.RedisURL})
		if err != nil {
			log.Error("writing client file", "err", err)
		}
		waitWarm(ctx, r.Warm)
		fmt.Fprintf(os.Stderr, `
airlock is up: node %s
  API       %s  (key and addresses in %s)
  gateway   %s    resolver %s    network %s
  CA        %s
  audit     %s%s
  redis     %s
  vault     %s

%s
Ctrl-C stops airlock and removes everything it made.
`, cfg.Node, r.API, filepath.Join(cfg.StateDir, "client.json"), r.Gateway, r.Resolver, r.Network, r.CA, r.Audit, reviewLine(r.Review)+e2bLine(r.E2B), deps.RedisURL, deps.VaultAddr,
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

// engineCanRun drops, from the embedded defaults, the templates whose runtime the engine lacks
// (gvisor without runsc), saying so; a configuration file that asks for a missing runtime
// stops start-up instead. When the engine cannot be asked, the node's own check says why.
func engineCanRun(ctx context.Context, ts []pool.Template) []pool.Template {
	cli, err := docker.NewClient()
	if err != nil {
		return ts
	}
	defer cli.Close()
	info, err := cli.Info(ctx)
	if err != nil {
		return ts
	}
	have := docker.RuntimesOf(info)
	var out []pool.Template
	for _, t := range ts {
		if err := docker.CannotRun(have, t); err != nil {
			fmt.Fprintf(os.Stderr, "airlock: %v; not warmed\n", err)
			continue
		}
		out = append(out, t)
	}
	return out
}

// reviewLine is the line of `airlock up`'s banner naming the review page, when there is one.
// e2bLine is the banner's word on the E2B listener: what to point the E2B SDKs at.
func e2bLine(url string) string {
	if url == "" {
		return ""
	}
	return "\n  e2b       " + url + "  (E2B_API_URL and E2B_SANDBOX_URL; E2B_API_KEY is the API key)"
}

func reviewLine(url string) string {
	if url == "" {
		return ""
	}
	return "\n  review    " + url + "  (sign in with the API key to read, or a reviewer key of review.reviewers to read and mark)"
}
