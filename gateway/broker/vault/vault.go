package vault

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/gateway/broker"
)

// Config says how to reach Vault and log in, and where what is minted per lease is kept until
// it is revoked.
type Config struct {
	Address string
	Token   string // for the token method
	Auth    Auth
	// Journal keeps what is minted per lease (never the values) until it is revoked, so that a
	// restart or a Vault outage at release does not lose it; nil keeps it in memory only.
	Journal Journal
	// Audit records each revocation, and each given up; nil records nothing. Node names this
	// node in those records.
	Audit audit.Sink
	Node  string
	// RetryFor is how long a failing revocation is retried before it is given up (recorded,
	// and left to expire in Vault); zero means 24h.
	RetryFor time.Duration
	Logger   *slog.Logger
}

// Broker reads credentials from Vault. Static KV values are cached for their entry's TTL and
// shared across leases (they are the same for every task). Safe for concurrent use.
type Broker struct {
	client *vaultapi.Client
	now    func() time.Time
	token  string
	auth   Auth

	authSecret atomic.Value // *vaultapi.Secret: the current login, nil when it must be redone
	renewals   atomic.Int64
	logins     atomic.Int64 // logins by Run after the first
	unwrapped  string       // the AppRole secret id once unwrapped; guarded by mu

	journal  Journal
	audit    audit.Sink
	node     string
	retryFor time.Duration
	log      *slog.Logger
	revs     *revocations
	seq      atomic.Uint64

	mu     sync.Mutex
	cache  map[string]*kvEntry
	leases map[string]*leaseMaterial
	ended  map[string]time.Time // leases released in the last hour
	minted atomic.Int64
}

type kvEntry struct {
	mu      sync.Mutex
	secret  broker.Secret
	expires time.Time
	fetched time.Time
	entry   *broker.Entry // the catalog entry it was read for, so it can be refreshed
}

var _ broker.Broker = (*Broker)(nil)

// Client is the broker's Vault client, logged in and kept so for as long as Run runs: what
// else of the node speaks to Vault (the snapshots' transit keys) shares its login.
func (b *Broker) Client() *vaultapi.Client { return b.client }

// New returns a broker talking to Vault at cfg.Address with cfg.Token.
func New(cfg Config) (*Broker, error) {
	vc := vaultapi.DefaultConfig()
	vc.Address = cfg.Address
	vc.Timeout = 10 * time.Second
	vc.MaxRetries = 0
	c, err := vaultapi.NewClient(vc)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	c.SetToken(cfg.Token)
	b := &Broker{client: c, now: time.Now, token: cfg.Token, auth: cfg.Auth, cache: map[string]*kvEntry{},
		leases: map[string]*leaseMaterial{}, ended: map[string]time.Time{},
		journal: cfg.Journal, audit: cfg.Audit, node: cfg.Node, retryFor: cmp.Or(cfg.RetryFor, 24*time.Hour),
		log: cfg.Logger, revs: newRevocations()}
	if b.journal == nil {
		b.journal = &memJournal{m: map[string][]byte{}}
	}
	if b.audit == nil {
		b.audit = audit.Discard{}
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	return b, nil
}

// Get returns the value of e for lease. A cached value serves until its TTL ends, never longer,
// whether or not Vault is reachable.
func (b *Broker) Get(ctx context.Context, lease broker.Lease, e *broker.Entry) (broker.Secret, error) {
	switch e.Source.Kind {
	case broker.SourceToken, broker.SourcePKI, broker.SourceDynamic:
		return b.perTask(ctx, lease, e)
	case broker.SourceOIDC:
		return b.oidcToken(ctx, e)
	}
	ent, fresh := b.cached(e.Source.Mount + "\x00" + e.Source.Path)
	defer ent.mu.Unlock()
	if fresh {
		return ent.secret, nil
	}
	if err := b.fetchKV(ctx, ent, e); err != nil {
		return nil, err
	}
	return ent.secret, nil
}

// cached returns the cache entry for key, locked, and whether it holds an unexpired value. The
// caller unlocks it; holding it while fetching makes concurrent first requests wait for one read.
func (b *Broker) cached(key string) (*kvEntry, bool) {
	b.mu.Lock()
	ent, ok := b.cache[key]
	if !ok {
		ent = &kvEntry{}
		b.cache[key] = ent
	}
	b.mu.Unlock()
	ent.mu.Lock()
	return ent, ent.secret != nil && b.now().Before(ent.expires)
}

// fetchKV reads e's KV secret into ent; ent.mu must be held.
func (b *Broker) fetchKV(ctx context.Context, ent *kvEntry, e *broker.Entry) error {
	kv, err := b.client.KVv2(e.Source.Mount).Get(ctx, e.Source.Path)
	if err != nil {
		return fmt.Errorf("%w: credential %q: vault read of %s/%s failed: %v", broker.ErrUnavailable, e.Name, e.Source.Mount, e.Source.Path, err)
	}
	s := broker.Secret{}
	for k, v := range kv.Data {
		if str, ok := v.(string); ok {
			s[k] = str
		}
	}
	now := b.now()
	ent.secret, ent.fetched, ent.expires, ent.entry = s, now, now.Add(e.Source.TTL), e
	return nil
}

// refreshKV re-reads, in the background, every cached KV value in the last fifth of its TTL (and
// at least two of its one-second ticks before it expires, which a short TTL would otherwise slip
// between), so requests keep finding a fresh value without waiting on Vault. A failed refresh
// keeps the old value until its own expiry, never longer.
func (b *Broker) refreshKV(ctx context.Context) {
	b.mu.Lock()
	ents := make([]*kvEntry, 0, len(b.cache))
	for _, e := range b.cache {
		ents = append(ents, e)
	}
	b.mu.Unlock()
	now := b.now()
	for _, ent := range ents {
		ent.mu.Lock()
		if e := ent.entry; e != nil && e.Source.Kind == broker.SourceKV && now.After(ent.fetched.Add(e.Source.TTL-max(e.Source.TTL/5, 2*time.Second))) {
			b.fetchKV(ctx, ent, e)
		}
		ent.mu.Unlock()
	}
}

// Values returns every credential value the broker holds that lease's requests may have carried:
// the shared values it has read and what it minted for the lease. The pool redacts a lease's
// recorded command output of them (the same step as broker.Redact), in case a credential came
// back to the sandbox in a response and the sandbox printed it.
func (b *Broker) Values(lease string) []string {
	b.mu.Lock()
	ents := make([]*kvEntry, 0, len(b.cache))
	for _, e := range b.cache {
		ents = append(ents, e)
	}
	m := b.leases[lease]
	b.mu.Unlock()
	var out []string
	for _, e := range ents {
		e.mu.Lock()
		out = append(out, e.secret.Values()...)
		e.mu.Unlock()
	}
	if m != nil {
		m.mu.Lock()
		for _, t := range m.tokens {
			out = append(out, t.secret.Values()...)
		}
		m.mu.Unlock()
	}
	return out
}
