package vault

import (
	"context"
	"fmt"
	"sync"
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
	secret   broker.Secret
	accessor string
	expires  time.Time
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

// taskToken returns lease's token for e, minting it from e's token role on first use. The token
// lives at most e's TTL and is renewed by minting anew when it lapses; tasks never share one.
func (b *Broker) taskToken(ctx context.Context, lease string, e *broker.Entry) (broker.Secret, error) {
	if lease == "" {
		return nil, fmt.Errorf("%w: credential %q is minted per lease, and this request has none", broker.ErrNotAllowed, e.Name)
	}
	m := b.material(lease)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return nil, fmt.Errorf("%w: lease %s has ended", broker.ErrNotAllowed, lease)
	}
	if t := m.tokens[e.Name]; t != nil && b.now().Add(5*time.Second).Before(t.expires) {
		return t.secret, nil
	}
	s, err := b.client.Auth().Token().CreateWithRoleWithContext(ctx, &vaultapi.TokenCreateRequest{
		Policies:        e.Source.Policies,
		TTL:             e.Source.TTL.String(),
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
	t := &mintedToken{
		secret:   broker.Secret{"token": s.Auth.ClientToken},
		accessor: s.Auth.Accessor,
		expires:  b.now().Add(time.Duration(s.Auth.LeaseDuration) * time.Second),
	}
	m.tokens[e.Name] = t
	b.minted.Add(1)
	return t.secret, nil
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
		if err := b.client.Auth().Token().RevokeAccessorWithContext(ctx, t.accessor); err != nil && first == nil {
			first = fmt.Errorf("vault: revoking lease %s's token for %q: %w", lease, name, err)
		}
	}
	return first
}
