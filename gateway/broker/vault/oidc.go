package vault

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/gateway/broker"
)

// oidcToken returns a Vault identity OIDC token for e's role, signed by Vault for the gateway's
// entity (so the gateway must log in through an auth method that has one, such as AppRole). It
// is cached until shortly before it expires; every lease gets the same identity.
func (b *Broker) oidcToken(ctx context.Context, e *broker.Entry) (broker.Secret, error) {
	ent, fresh := b.cached("oidc\x00" + e.Source.Role)
	defer ent.mu.Unlock()
	if fresh {
		return ent.secret, nil
	}
	s, err := b.client.Logical().ReadWithContext(ctx, "identity/oidc/token/"+e.Source.Role)
	if err != nil {
		return nil, fmt.Errorf("%w: credential %q: vault identity token for role %q: %v", broker.ErrUnavailable, e.Name, e.Source.Role, err)
	}
	if s == nil {
		return nil, fmt.Errorf("%w: credential %q: vault returned no identity token", broker.ErrUnavailable, e.Name)
	}
	tok, _ := s.Data["token"].(string)
	if tok == "" {
		return nil, fmt.Errorf("%w: credential %q: vault returned no identity token", broker.ErrUnavailable, e.Name)
	}
	ttl := time.Minute
	if n, err := asInt(s.Data["ttl"]); err == nil && n > 0 {
		ttl = time.Duration(n) * time.Second
	}
	// Refresh at four fifths of its life, so no upstream ever sees it expire in flight.
	ent.secret, ent.expires = broker.Secret{"token": tok}, b.now().Add(ttl*4/5)
	return ent.secret, nil
}

func asInt(v any) (int64, error) {
	switch n := v.(type) {
	case interface{ Int64() (int64, error) }:
		return n.Int64()
	case float64:
		return int64(n), nil
	case int:
		return int64(n), nil
	}
	return 0, fmt.Errorf("not a number: %v", v)
}
