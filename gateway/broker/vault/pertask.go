package vault

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/gateway/broker"
)

// leaseMaterial is what was minted for one lease: the current item per catalog entry, minted on
// first use. Its mutex makes concurrent first requests for one lease mint once.
type leaseMaterial struct {
	mu      sync.Mutex
	tokens  map[string]*mintedToken // entry name ->
	expires time.Time               // the lease's end as last seen, which bounds renewals
	ended   bool
}

// mintedToken is one item minted for a lease: its value, what identifies it to Vault, and until
// when it lives. expires is guarded by the lease material's mutex.
type mintedToken struct {
	secret  broker.Secret
	item    Minted
	expires time.Time
	// lapsed, when set, reports that renewal stopped and the material must be read again.
	lapsed func() bool
	// stop, when set, ends the renewal of the material.
	stop func()
}

func (b *Broker) material(l broker.Lease) *leaseMaterial {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.leases[l.ID]
	if m == nil {
		m = &leaseMaterial{tokens: map[string]*mintedToken{}}
		// A lease that ended never mints again, even if a late request names it.
		_, m.ended = b.ended[l.ID]
		b.leases[l.ID] = m
	}
	return m
}

// refreshWindow bounds how close to its expiry minted material is still handed out: the
// smaller of five seconds and a fifth of its life, so material too short-lived for the window
// is not minted anew on every request.
const refreshWindow = 5 * time.Second

// reusable reports whether t may serve another request of l: it has not lapsed, and it either
// lives to the lease's end or is outside its refresh window.
func (b *Broker) reusable(t *mintedToken, l broker.Lease) bool {
	if t.lapsed != nil && t.lapsed() {
		return false
	}
	now := b.now()
	if !now.Before(t.expires) {
		return false
	}
	if !l.Expires.IsZero() && !t.expires.Before(l.Expires) {
		return true // it covers the rest of the lease
	}
	window := min(refreshWindow, t.expires.Sub(t.item.Minted)/5)
	return now.Add(window).Before(t.expires)
}

// perTask returns lease's material for e (a token, a client certificate or a dynamic secret),
// minting it on first use. It lives at most e's TTL and the lease's remaining time; material
// minted anew replaces the old, which is revoked. What is minted is in the journal before its
// value is handed out, so that a crash cannot leave it unrevoked and forgotten.
func (b *Broker) perTask(ctx context.Context, l broker.Lease, e *broker.Entry) (broker.Secret, error) {
	if l.ID == "" {
		return nil, fmt.Errorf("%w: credential %q is minted per lease, and this request has none", broker.ErrNotAllowed, e.Name)
	}
	m := b.material(l)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return nil, fmt.Errorf("%w: lease %s has ended", broker.ErrNotAllowed, l.ID)
	}
	m.expires = l.Expires
	old := m.tokens[e.Name]
	if old != nil && b.reusable(old, l) {
		return old.secret, nil
	}
	var t *mintedToken
	var err error
	switch e.Source.Kind {
	case broker.SourcePKI:
		t, err = b.issueCert(ctx, l, e)
	case broker.SourceDynamic:
		t, err = b.readDynamic(ctx, l, e, m)
	default:
		t, err = b.mintToken(ctx, l, e)
	}
	if err != nil {
		return nil, err
	}
	if err := b.journal.Put(ctx, t.item.ID, t.item.encode()); err != nil {
		// Material nobody could revoke after a crash is not handed out.
		b.retire(t)
		return nil, fmt.Errorf("%w: credential %q: recording what was minted failed, so it is not used: %v", broker.ErrUnavailable, e.Name, err)
	}
	if old != nil {
		b.retire(old)
	}
	m.tokens[e.Name] = t
	b.minted.Add(1)
	return t.secret, nil
}

// newItem describes material minted for l under e.
func (b *Broker) newItem(l broker.Lease, e *broker.Entry, kind, ref string) Minted {
	return Minted{ID: l.ID + "/" + e.Name + "/" + strconv.FormatUint(b.seq.Add(1), 36) + "-" + strconv.FormatInt(b.now().UnixNano(), 36),
		Lease: l.ID, Tenant: l.Tenant, Task: l.Task, Credential: e.Name, Kind: kind, Ref: ref, Minted: b.now()}
}

// vaultTTL writes d for Vault in whole seconds, rounded up.
func vaultTTL(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) + "s"
}

func (b *Broker) mintToken(ctx context.Context, l broker.Lease, e *broker.Entry) (*mintedToken, error) {
	s, err := b.client.Auth().Token().CreateWithRoleWithContext(ctx, &vaultapi.TokenCreateRequest{
		Policies:        e.Source.Policies,
		TTL:             vaultTTL(l.Lifetime(e.Source.TTL)),
		DisplayName:     "airlock-" + e.Name,
		Metadata:        map[string]string{"airlock_lease": l.ID, "airlock_credential": e.Name},
		NoDefaultPolicy: true,
	}, e.Source.Role)
	if err != nil {
		return nil, fmt.Errorf("%w: credential %q: minting a task token from role %q failed: %v", broker.ErrUnavailable, e.Name, e.Source.Role, err)
	}
	if s == nil || s.Auth == nil || s.Auth.Accessor == "" {
		return nil, fmt.Errorf("%w: credential %q: vault returned no token", broker.ErrUnavailable, e.Name)
	}
	t := &mintedToken{secret: broker.Secret{"token": s.Auth.ClientToken}, item: b.newItem(l, e, KindToken, s.Auth.Accessor)}
	t.expires = t.item.Minted.Add(time.Duration(s.Auth.LeaseDuration) * time.Second)
	t.item.Expires = t.expires
	return t, nil
}

// issueCert issues a client certificate for lease from e's PKI role; revoking it puts it on the
// CA's revocation list.
func (b *Broker) issueCert(ctx context.Context, l broker.Lease, e *broker.Entry) (*mintedToken, error) {
	s, err := b.client.Logical().WriteWithContext(ctx, e.Source.Mount+"/issue/"+e.Source.Role, map[string]any{
		"common_name": "airlock-" + l.ID, "ttl": vaultTTL(l.Lifetime(e.Source.TTL)),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: credential %q: issuing a certificate from %s/%s failed: %v", broker.ErrUnavailable, e.Name, e.Source.Mount, e.Source.Role, err)
	}
	cert, _ := s.Data["certificate"].(string)
	key, _ := s.Data["private_key"].(string)
	serial, _ := s.Data["serial_number"].(string)
	if cert == "" || key == "" || serial == "" {
		return nil, fmt.Errorf("%w: credential %q: vault returned no certificate", broker.ErrUnavailable, e.Name)
	}
	t := &mintedToken{secret: broker.Secret{"certificate": cert, "private_key": key, "serial": serial}, item: b.newItem(l, e, KindCertificate, serial)}
	t.item.Mount = e.Source.Mount
	t.expires = t.item.Minted.Add(l.Lifetime(e.Source.TTL))
	if v, ok := s.Data["expiration"].(json.Number); ok {
		if n, err := v.Int64(); err == nil {
			t.expires = time.Unix(n, 0)
		}
	}
	t.item.Expires = t.expires
	return t, nil
}

// readDynamic reads e's path for l. The Vault lease it returns is held to the task's lease: cut
// to what is left of it at once, then renewed, never past the task's lease's end, until the
// task's lease ends or Vault stops renewing (max TTL), when it lapses and is read again on next
// use (and the lapsed one revoked).
func (b *Broker) readDynamic(ctx context.Context, l broker.Lease, e *broker.Entry, m *leaseMaterial) (*mintedToken, error) {
	s, err := b.client.Logical().ReadWithContext(ctx, e.Source.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: credential %q: reading %s failed: %v", broker.ErrUnavailable, e.Name, e.Source.Path, err)
	}
	if s == nil || s.LeaseID == "" {
		return nil, fmt.Errorf("%w: credential %q: %s returned no leased secret", broker.ErrUnavailable, e.Name, e.Source.Path)
	}
	fields := broker.Secret{}
	for k, v := range s.Data {
		if str, ok := v.(string); ok {
			fields[k] = str
		}
	}
	t := &mintedToken{secret: fields, item: b.newItem(l, e, KindLease, s.LeaseID)}
	full := time.Duration(s.LeaseDuration) * time.Second
	t.expires = t.item.Minted.Add(full)
	if s.Renewable {
		if want := l.Lifetime(full); want < full {
			// Shorten it to the task's lease: a renewal's increment counts from now.
			r, err := b.client.Sys().RenewWithContext(ctx, s.LeaseID, int((want+time.Second-1)/time.Second))
			if err != nil || r == nil {
				b.revokeItem(ctx, t.item)
				return nil, fmt.Errorf("%w: credential %q: holding %s's lease to the task's failed: %v", broker.ErrUnavailable, e.Name, e.Source.Path, err)
			}
			t.expires = b.now().Add(time.Duration(r.LeaseDuration) * time.Second)
		}
	} else if !l.Expires.IsZero() && t.expires.After(l.Expires) {
		// It cannot be held to the lease; it is revoked when the lease ends, and the journal
		// keeps it until then.
		b.log.Warn("a dynamic credential outlives its lease and cannot be renewed shorter", "credential", e.Name, "lease", l.ID)
	}
	t.item.Expires = t.expires
	if s.Renewable {
		b.keepRenewed(t, m, full)
	}
	return t, nil
}

// keepRenewed renews t's Vault lease at two thirds of each term, by at most full and never past
// the task's lease's end as m last saw it, until it is stopped or a renewal fails or comes back
// empty (the secret's max TTL), when t lapses.
func (b *Broker) keepRenewed(t *mintedToken, m *leaseMaterial, full time.Duration) {
	stop := make(chan struct{})
	var once sync.Once
	t.stop = func() { once.Do(func() { close(stop) }) }
	lapsed := make(chan struct{})
	t.lapsed = func() bool {
		select {
		case <-lapsed:
			return true
		default:
			return false
		}
	}
	// The goroutine reads the term it set itself; m.mu guards the copy perTask reads.
	term := t.expires.Sub(b.now())
	go func() {
		defer close(lapsed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(term * 2 / 3):
			}
			m.mu.Lock()
			end := m.expires
			m.mu.Unlock()
			inc := full
			if !end.IsZero() {
				left := end.Sub(b.now())
				if left <= 0 {
					return // the lease is over; its release revokes this
				}
				inc = min(inc, left)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r, err := b.client.Sys().RenewWithContext(ctx, t.item.Ref, int((inc+time.Second-1)/time.Second))
			cancel()
			if err != nil || r == nil || r.LeaseDuration <= 0 {
				return
			}
			term = time.Duration(r.LeaseDuration) * time.Second
			m.mu.Lock()
			t.expires = b.now().Add(term)
			t.item.Expires = t.expires
			item := t.item
			m.mu.Unlock()
			// The journal must not think it ends before it does: an item past its recorded
			// expiry is no longer retried.
			jctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := b.journal.Put(jctx, item.ID, item.encode()); err != nil {
				b.log.Warn("recording a renewed credential's new expiry failed", "credential", item.Credential, "lease", item.Lease, "err", err)
			}
			cancel()
			b.renewals.Add(1)
		}
	}()
}
