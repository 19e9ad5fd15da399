package vault

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/gateway/broker"
)

// leaseMaterial is what was minted for one lease: one token per catalog entry, minted on first
// use. Its mutex makes concurrent first requests for one lease mint once.
type leaseMaterial struct {
	mu     sync.Mutex
	tokens map[string]*mintedToken // entry name ->
	ended  bool
}

type mintedToken struct {
	secret  broker.Secret
	revoke  func(ctx context.Context) error
	expires time.Time
	// lapsed, when set, reports that renewal stopped and the material must be read again.
	lapsed func() bool
}

func (b *Broker) material(lease string) *leaseMaterial {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.leases[lease]
	if m == nil {
		m = &leaseMaterial{tokens: map[string]*mintedToken{}}
		// A lease that ended never mints again, even if a late request names it.
		_, m.ended = b.ended[lease]
		b.leases[lease] = m
	}
	return m
}

// perTask returns lease's material for e (a token, or a client certificate), minting it on first
// use. It lives at most e's TTL and is minted anew when it lapses; tasks never share it.
func (b *Broker) perTask(ctx context.Context, l broker.Lease, e *broker.Entry) (broker.Secret, error) {
	lease := l.ID
	if lease == "" {
		return nil, fmt.Errorf("%w: credential %q is minted per lease, and this request has none", broker.ErrNotAllowed, e.Name)
	}
	m := b.material(lease)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return nil, fmt.Errorf("%w: lease %s has ended", broker.ErrNotAllowed, lease)
	}
	if t := m.tokens[e.Name]; t != nil && b.now().Add(5*time.Second).Before(t.expires) && (t.lapsed == nil || !t.lapsed()) {
		return t.secret, nil
	}
	var t *mintedToken
	var err error
	switch e.Source.Kind {
	case broker.SourcePKI:
		t, err = b.issueCert(ctx, l, e)
	case broker.SourceDynamic:
		t, err = b.readDynamic(ctx, lease, e)
	default:
		t, err = b.mintToken(ctx, l, e)
	}
	if err != nil {
		return nil, err
	}
	m.tokens[e.Name] = t
	b.minted.Add(1)
	return t.secret, nil
}

func (b *Broker) mintToken(ctx context.Context, l broker.Lease, e *broker.Entry) (*mintedToken, error) {
	lease := l.ID
	s, err := b.client.Auth().Token().CreateWithRoleWithContext(ctx, &vaultapi.TokenCreateRequest{
		Policies:        e.Source.Policies,
		TTL:             l.Lifetime(e.Source.TTL).Round(time.Second).String(),
		DisplayName:     "airlock-" + e.Name,
		Metadata:        map[string]string{"airlock_lease": lease, "airlock_credential": e.Name},
		NoDefaultPolicy: true,
	}, e.Source.Role)
	if err != nil {
		return nil, fmt.Errorf("%w: credential %q: minting a task token from role %q failed: %v", broker.ErrUnavailable, e.Name, e.Source.Role, err)
	}
	if s == nil || s.Auth == nil {
		return nil, fmt.Errorf("%w: credential %q: vault returned no token", broker.ErrUnavailable, e.Name)
	}
	accessor := s.Auth.Accessor
	t := &mintedToken{
		secret: broker.Secret{"token": s.Auth.ClientToken},
		revoke: func(ctx context.Context) error {
			return b.client.Auth().Token().RevokeAccessorWithContext(ctx, accessor)
		},
		expires: b.now().Add(time.Duration(s.Auth.LeaseDuration) * time.Second),
	}
	return t, nil
}

// issueCert issues a client certificate for lease from e's PKI role; revoking it at release
// puts it on the CA's revocation list.
func (b *Broker) issueCert(ctx context.Context, l broker.Lease, e *broker.Entry) (*mintedToken, error) {
	lease := l.ID
	s, err := b.client.Logical().WriteWithContext(ctx, e.Source.Mount+"/issue/"+e.Source.Role, map[string]any{
		"common_name": "airlock-" + lease, "ttl": l.Lifetime(e.Source.TTL).Round(time.Second).String(),
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
	exp := b.now().Add(l.Lifetime(e.Source.TTL))
	if v, ok := s.Data["expiration"].(json.Number); ok {
		if n, err := v.Int64(); err == nil {
			exp = time.Unix(n, 0)
		}
	}
	mount := e.Source.Mount
	return &mintedToken{
		secret: broker.Secret{"certificate": cert, "private_key": key, "serial": serial},
		revoke: func(ctx context.Context) error {
			_, err := b.client.Logical().WriteWithContext(ctx, mount+"/revoke", map[string]any{"serial_number": serial})
			return err
		},
		expires: exp,
	}, nil
}

// Release revokes every token minted for lease. A lease that minted nothing costs nothing.
func (b *Broker) Release(ctx context.Context, lease string) error {
	b.mu.Lock()
	m := b.leases[lease]
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
	b.mu.Unlock()
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ended = true
	var first error
	for name, t := range m.tokens {
		if err := t.revoke(ctx); err != nil && first == nil {
			first = fmt.Errorf("vault: revoking lease %s's %q: %w", lease, name, err)
		}
	}
	return first
}

// readDynamic reads e's path for lease and keeps the Vault lease it returns renewed (a
// LifetimeWatcher) until the task's lease ends or Vault stops renewing (max TTL), when it is
// read again on next use.
func (b *Broker) readDynamic(ctx context.Context, lease string, e *broker.Entry) (*mintedToken, error) {
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
	leaseID := s.LeaseID
	t := &mintedToken{
		secret: fields,
		// Far ahead: the watcher, not a clock, says when it lapses.
		expires: b.now().Add(24 * time.Hour),
		revoke: func(ctx context.Context) error {
			return b.client.Sys().RevokeWithContext(ctx, leaseID)
		},
	}
	var lapsed atomic.Bool
	t.lapsed = lapsed.Load
	if !s.Renewable {
		t.expires = b.now().Add(time.Duration(s.LeaseDuration) * time.Second)
		return t, nil
	}
	w, err := b.client.NewLifetimeWatcher(&vaultapi.LifetimeWatcherInput{Secret: s})
	if err != nil {
		return nil, fmt.Errorf("%w: credential %q: %v", broker.ErrUnavailable, e.Name, err)
	}
	go w.Start()
	go func() {
		for {
			select {
			case <-w.DoneCh():
				lapsed.Store(true)
				return
			case <-w.RenewCh():
				b.renewals.Add(1)
			}
		}
	}()
	revoke := t.revoke
	t.revoke = func(ctx context.Context) error {
		w.Stop()
		return revoke(ctx)
	}
	return t, nil
}
