package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/audit"
)

// Kinds of minted material, by how Vault revokes them.
const (
	KindToken       = "token"       // Ref is the token's accessor
	KindCertificate = "certificate" // Ref is the serial, Mount the PKI mount
	KindLease       = "lease"       // Ref is the Vault lease id of a dynamic secret
)

// Minted is one item minted for a lease as the journal keeps it: what Vault needs to revoke it,
// never its value.
type Minted struct {
	ID         string    `json:"id"`
	Lease      string    `json:"lease"`
	Tenant     string    `json:"tenant,omitempty"`
	Task       string    `json:"task,omitempty"`
	Credential string    `json:"credential"`
	Kind       string    `json:"kind"`
	Ref        string    `json:"ref"`
	Mount      string    `json:"mount,omitempty"`
	Minted     time.Time `json:"minted"`
	// Expires is when Vault ends it by itself: past it, there is nothing left to revoke.
	Expires time.Time `json:"expires"`
}

func (m Minted) encode() []byte {
	b, _ := json.Marshal(m)
	return b
}

// what names the item in words, for records and logs.
func (m Minted) what() string {
	switch m.Kind {
	case KindCertificate:
		return "certificate " + m.Ref + " of credential " + m.Credential
	case KindLease:
		return "Vault lease " + m.Ref + " of credential " + m.Credential
	}
	return "token of credential " + m.Credential + " minted " + m.Minted.UTC().Format(time.RFC3339)
}

// Journal keeps, outside the process, what was minted for each lease until it is revoked, so
// that neither a crash nor a Vault outage at release leaves material nobody will revoke. Keys
// are item ids; values are opaque. redisstore.Journal keeps one per node in Redis.
type Journal interface {
	Put(ctx context.Context, id string, value []byte) error
	Delete(ctx context.Context, id string) error
	All(ctx context.Context) (map[string][]byte, error)
}

// memJournal is the journal of a broker that was given none: it survives Vault outages, not
// restarts.
type memJournal struct {
	mu sync.Mutex
	m  map[string][]byte
}

var _ Journal = (*memJournal)(nil)

func (j *memJournal) Put(_ context.Context, id string, v []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.m[id] = v
	return nil
}

func (j *memJournal) Delete(_ context.Context, id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.m, id)
	return nil
}

func (j *memJournal) All(context.Context) (map[string][]byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string][]byte, len(j.m))
	for k, v := range j.m {
		out[k] = v
	}
	return out, nil
}

// pending is an item waiting to be revoked, or, once revoked, to leave the journal.
type pending struct {
	item     Minted
	first    time.Time // first attempt
	next     time.Time
	attempts int
	lastErr  string
	revoked  bool // revoked and recorded; only the journal entry is left
	busy     bool // an attempt is under way
}

// The outcomes of a revocation, as metric labels and audit events.
const (
	revokedNow     = "revoked"   // Vault revoked it
	revokedExpired = "expired"   // it had expired in Vault before a revocation got through
	revokeGaveUp   = "abandoned" // still failing after RetryFor
	revokeFailed   = "failed"    // one attempt failed; it is retried
)

// revocations is the broker's revocation backlog and its counts.
type revocations struct {
	mu      sync.Mutex
	pending map[string]*pending // item id ->
	wake    chan struct{}
	results *prometheus.CounterVec
	backlog prometheus.GaugeFunc
}

func newRevocations() *revocations {
	r := &revocations{pending: map[string]*pending{}, wake: make(chan struct{}, 1)}
	r.results = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "airlock_credentials_revocations_total",
		Help: "Revocations of material minted for leases, by result (revoked, expired, abandoned, failed attempt).",
	}, []string{"result"})
	r.backlog = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "airlock_credentials_revocation_backlog",
		Help: "Items minted for leases that ended and are not yet revoked (Vault unreachable, or a restart).",
	}, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for _, p := range r.pending {
			if !p.revoked {
				n++
			}
		}
		return float64(n)
	})
	return r
}

// Collectors are the broker's metrics.
func (b *Broker) Collectors() []prometheus.Collector {
	return []prometheus.Collector{b.revs.results, b.revs.backlog}
}

// Backlog is how many items wait to be revoked.
func (b *Broker) Backlog() int {
	b.revs.mu.Lock()
	defer b.revs.mu.Unlock()
	n := 0
	for _, p := range b.revs.pending {
		if !p.revoked {
			n++
		}
	}
	return n
}

// retire hands t to the revoker: its renewal stops and it is revoked as soon as Vault answers.
// The caller holds the lease material's mutex.
func (b *Broker) retire(t *mintedToken) {
	if t.stop != nil {
		t.stop()
	}
	b.enqueue(t.item)
}

func (b *Broker) enqueue(items ...Minted) {
	b.track(false, items...)
	select {
	case b.revs.wake <- struct{}{}:
	default:
	}
}

// track adds the items the backlog does not hold yet, claimed for an attempt when claim is
// set, and returns the ones it added.
func (b *Broker) track(claim bool, items ...Minted) []*pending {
	now := b.now()
	b.revs.mu.Lock()
	defer b.revs.mu.Unlock()
	var added []*pending
	for _, it := range items {
		if _, ok := b.revs.pending[it.ID]; !ok {
			p := &pending{item: it, first: now, next: now, busy: claim}
			b.revs.pending[it.ID] = p
			added = append(added, p)
		}
	}
	return added
}

// Revoke revokes everything minted for lease so far; the lease goes on and mints again on next
// use (a token swap calls it, so no material minted under the old token outlives it). What
// cannot be revoked now is retried until Vault answers.
func (b *Broker) Revoke(ctx context.Context, lease string) error {
	return b.revokeLease(ctx, lease, false)
}

// Release revokes everything minted for lease and never mints for it again. What cannot be
// revoked now is retried until Vault answers (the error says so); it is in the journal until
// then, and expires with the lease in any case.
func (b *Broker) Release(ctx context.Context, lease string) error {
	return b.revokeLease(ctx, lease, true)
}

func (b *Broker) revokeLease(ctx context.Context, lease string, end bool) error {
	b.mu.Lock()
	m := b.leases[lease]
	if end {
		delete(b.leases, lease)
		now := b.now()
		if len(b.ended) > 100000 {
			for k, at := range b.ended {
				if now.Sub(at) > time.Hour {
					delete(b.ended, k)
				}
			}
		}
		b.ended[lease] = now
	}
	b.mu.Unlock()
	if m == nil {
		return nil
	}
	m.mu.Lock()
	if end {
		m.ended = true
	}
	var items []Minted
	for name, t := range m.tokens {
		if t.stop != nil {
			t.stop()
		}
		items = append(items, t.item)
		delete(m.tokens, name)
	}
	m.mu.Unlock()
	// Each is tried now; a failure stays in the backlog for the revoker.
	var failed []string
	for _, p := range b.track(true, items...) {
		if err := b.attempt(ctx, p); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", p.item.what(), err))
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		return fmt.Errorf("vault: %d of %d revocations for lease %s failed and are retried until Vault answers: %s",
			len(failed), len(items), lease, strings.Join(failed, "; "))
	}
	return nil
}

// errNotListed is Vault declining to put a certificate on its revocation list because it
// expires within seconds.
var errNotListed = errors.New("vault did not list the certificate as revoked")

// revokeItem asks Vault to revoke it.
func (b *Broker) revokeItem(ctx context.Context, it Minted) error {
	switch it.Kind {
	case KindToken:
		return b.client.Auth().Token().RevokeAccessorWithContext(ctx, it.Ref)
	case KindCertificate:
		r, err := b.client.Logical().WriteWithContext(ctx, it.Mount+"/revoke", map[string]any{"serial_number": it.Ref})
		if err != nil {
			return err
		}
		// Vault answers a certificate with under 2 s of life left with a warning, and lists
		// nothing: that is no revocation, and the record must not say it is one.
		if r == nil || r.Data["revocation_time"] == nil {
			var why []string
			if r != nil {
				why = r.Warnings
			}
			return fmt.Errorf("%w: %s", errNotListed, strings.Join(why, "; "))
		}
		return nil
	case KindLease:
		return b.client.Sys().RevokeWithContext(ctx, it.Ref)
	}
	return fmt.Errorf("unknown kind %q", it.Kind)
}

// attempt tries p, which the caller has claimed, once: on success it is recorded and leaves the
// journal; on failure it waits, with backoff, for its next attempt, unless it has expired in
// Vault or has failed for longer than RetryFor, when it is recorded as such and dropped.
func (b *Broker) attempt(ctx context.Context, p *pending) error {
	defer func() {
		b.revs.mu.Lock()
		p.busy = false
		b.revs.mu.Unlock()
	}()
	if !p.revoked {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := b.revokeItem(actx, p.item)
		cancel()
		now := b.now()
		switch {
		case err == nil:
			b.settle(ctx, p, revokedNow, "")
		case errors.Is(err, errNotListed):
			// Retrying cannot help: the certificate only gets closer to its end.
			b.settle(ctx, p, revokedExpired, err.Error())
		case !now.Before(p.item.Expires):
			b.settle(ctx, p, revokedExpired, err.Error())
		case now.Sub(p.first) >= b.retryFor:
			b.settle(ctx, p, revokeGaveUp, err.Error())
		default:
			b.revs.results.WithLabelValues(revokeFailed).Inc()
			b.revs.mu.Lock()
			p.attempts++
			p.lastErr = err.Error()
			p.next = now.Add(min(time.Second<<min(p.attempts, 9), 5*time.Minute))
			b.revs.mu.Unlock()
			return err
		}
	}
	// Settled: the journal entry goes; if that fails (Redis down), the revoker tries again.
	if err := b.journal.Delete(ctx, p.item.ID); err != nil {
		b.revs.mu.Lock()
		p.next = b.now().Add(5 * time.Second)
		b.revs.mu.Unlock()
		return nil
	}
	b.revs.mu.Lock()
	delete(b.revs.pending, p.item.ID)
	b.revs.mu.Unlock()
	return nil
}

// settle records how p ended, then marks it revoked: whoever sees it settled (Backlog) finds
// its record already written.
func (b *Broker) settle(ctx context.Context, p *pending, result, lastErr string) {
	b.revs.results.WithLabelValues(result).Inc()
	b.revs.mu.Lock()
	attempts := p.attempts + 1
	b.revs.mu.Unlock()
	defer func() {
		b.revs.mu.Lock()
		p.revoked = true
		b.revs.mu.Unlock()
	}()
	it := p.item
	rec := audit.Record{Kind: audit.KindLease, Node: b.node, Tenant: it.Tenant, Lease: it.Lease, Task: it.Task, Credential: it.Credential}
	switch result {
	case revokedNow:
		rec.Event, rec.Reason = "revoke", "revoked "+it.what()
		if attempts > 1 {
			rec.Reason += fmt.Sprintf(" (after %d attempts)", attempts)
		}
	case revokedExpired:
		rec.Event, rec.Reason = "revoke-expired", it.what()+" expired in Vault before a revocation got through (last error: "+lastErr+")"
		if strings.Contains(lastErr, errNotListed.Error()) {
			rec.Reason = it.what() + " was within seconds of its end, which Vault does not list as revoked (" + lastErr + "); it expires at " +
				it.Expires.UTC().Format(time.RFC3339)
		}
	case revokeGaveUp:
		rec.Event, rec.Reason = "revoke-abandoned", fmt.Sprintf("gave up revoking %s after %d attempts over %s (last error: %s); it expires at %s",
			it.what(), attempts, b.retryFor, lastErr, it.Expires.UTC().Format(time.RFC3339))
		b.log.Error("gave up revoking per-task material", "lease", it.Lease, "credential", it.Credential, "err", lastErr)
	}
	if err := b.audit.Write(ctx, rec); err != nil {
		b.log.Error("audit write failed", "err", err)
	}
}

// recover queues, from the journal, every item this process did not mint: what an earlier run
// of the node minted and did not revoke. Its value died with that process, so it can only be
// revoked, whether or not its lease still runs.
func (b *Broker) recover(ctx context.Context) error {
	all, err := b.journal.All(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	b.mu.Lock()
	for _, m := range b.leases {
		m.mu.Lock()
		for _, t := range m.tokens {
			live[t.item.ID] = true
		}
		m.mu.Unlock()
	}
	b.mu.Unlock()
	var items []Minted
	var bad []error
	for id, v := range all {
		if live[id] {
			continue
		}
		var it Minted
		if err := json.Unmarshal(v, &it); err != nil || it.ID != id {
			bad = append(bad, fmt.Errorf("journal entry %q: %v", id, err))
			continue
		}
		items = append(items, it)
	}
	b.enqueue(items...)
	return errors.Join(bad...)
}

// revoker retries the backlog until ctx ends: at start it takes over what the journal holds
// from an earlier run, then tries each item when its backoff allows.
func (b *Broker) revoker(ctx context.Context) {
	for ctx.Err() == nil {
		if err := b.recover(ctx); err != nil {
			b.log.Error("reading the journal of minted credentials; retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			continue
		}
		break
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		now := b.now()
		b.revs.mu.Lock()
		var due []*pending
		for _, p := range b.revs.pending {
			if !p.busy && !now.Before(p.next) {
				p.busy = true
				due = append(due, p)
			}
		}
		b.revs.mu.Unlock()
		for _, p := range due {
			if err := b.attempt(ctx, p); err != nil {
				b.log.Warn("revocation failed; retrying", "lease", p.item.Lease, "what", p.item.what(), "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.revs.wake:
		}
	}
}
