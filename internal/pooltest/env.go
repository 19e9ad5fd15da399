package pooltest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/redisstore"
	"github.com/airlock-dev/airlock/token"
)

// Env is a pool on a real redis-server: the shared store, one node's binding cache, a dev
// issuer with the verifier that trusts it, and a Manager over a Runtime that starts nothing.
// Tests of the pool, its API and its store, and the pool benchmark, all set up through it.
type Env struct {
	Redis    *devstack.Redis
	RDB      *redis.Client
	Store    *redisstore.Store
	Cache    *binding.Cache
	Issuer   *token.DevIssuer
	Verifier *token.Verifier
	Runtime  *Runtime
	Manager  *pool.Manager
	stop     []func()
}

// EnvConfig says what differs between environments; the zero value is a node "n1" with one
// template "default" (min_warm 2, max_total 4, TTLs of a minute and an hour).
type EnvConfig struct {
	Node      string          // default "n1"
	Prefix    string          // Redis key prefix; default the node's name and ":"
	Templates []pool.Template // each completed by Template; default one
	// Pool, when set, changes the Manager's configuration before it is built (what it checks,
	// how often, the audit sink: Discard unless set).
	Pool func(*pool.Config)
	// Runtime, when set, changes the runtime before anything uses it.
	Runtime func(*Runtime)
	// Store, when set, is used instead of a new redis-server (a second node on the same one).
	Store *redisstore.Store
	// NoRun leaves the Manager to the caller: it is built, not run.
	NoRun bool
}

// Start builds and runs an Env in dir until Close; it makes no assertion, so a benchmark
// program can use it too.
func Start(ctx context.Context, dir string, c EnvConfig) (*Env, error) {
	if c.Node == "" {
		c.Node = "n1"
	}
	if c.Prefix == "" {
		c.Prefix = c.Node + ":"
	}
	if len(c.Templates) == 0 {
		c.Templates = []pool.Template{{MinWarm: 2, MaxTotal: 4}}
	}
	e := &Env{Store: c.Store}
	ctx, cancel := context.WithCancel(ctx)
	e.stop = append(e.stop, cancel)
	if e.Store == nil {
		// Not on ctx: the Manager's stop cancels ctx and then cleans up in Redis, which must
		// outlive it (Close stops Redis last).
		r, err := devstack.StartRedis(context.WithoutCancel(ctx), dir)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("redis-server: %w (make test installs it)", err)
		}
		e.Redis = r
		e.stop = append(e.stop, r.Stop)
		opts, _ := redis.ParseURL(r.URL)
		e.RDB = redis.NewClient(opts)
		e.stop = append(e.stop, func() { e.RDB.Close() })
		e.Store = redisstore.New(e.RDB, c.Prefix)
	}
	e.Cache = binding.NewCache(c.Node, e.Store, 0)
	go e.Cache.Run(ctx)
	e.Issuer, _ = token.NewDevIssuer("dev", "aud")
	e.Verifier = &token.Verifier{Audience: "aud", Issuers: map[string]token.Issuer{"dev": e.Issuer.Issuer(time.Hour)}}
	e.Runtime = &Runtime{}
	if c.Node != "n1" {
		e.Runtime.Node = c.Node
	}
	if c.Runtime != nil {
		c.Runtime(e.Runtime)
	}
	tmpls := make([]pool.Template, len(c.Templates))
	for i, t := range c.Templates {
		tmpls[i] = Template(t)
	}
	pc := pool.Config{Node: c.Node, Templates: tmpls, Runtime: e.Runtime, Store: e.Store, Binder: e.Cache,
		Audit: audit.Discard{}, Verify: e.Verifier.VerifyFor, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if c.Pool != nil {
		c.Pool(&pc)
	}
	m, err := pool.New(pc)
	if err != nil {
		e.Close()
		return nil, err
	}
	e.Manager = m
	if !c.NoRun {
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		// Close stops it first, and waits for its cleanup, before Redis goes.
		e.stop = append(e.stop, func() { cancel(); <-done })
	}
	return e, nil
}

// NewEnv is Start for a test: it fails the test when the environment cannot start and closes
// it when the test ends.
func NewEnv(t testing.TB, c EnvConfig) *Env {
	t.Helper()
	e, err := Start(context.Background(), t.TempDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// Close stops the Manager, then the cache, then Redis.
func (e *Env) Close() {
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
	e.stop = nil
}

// WaitWarm waits, up to a deadline, until every template has at least n warm sandboxes and the
// cache follows the binding channel.
func (e *Env) WaitWarm(ctx context.Context, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ok := e.Cache.Live()
		ps, err := e.Manager.Pools(ctx)
		for _, p := range ps {
			ok = ok && p.Warm >= n
		}
		if ok && err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pools not %d warm within %s: %+v %v", n, within, ps, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// MustWarm is WaitWarm for a test, within ten seconds.
func (e *Env) MustWarm(t testing.TB, n int) {
	t.Helper()
	if err := e.WaitWarm(context.Background(), n, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
