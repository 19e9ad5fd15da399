package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/token"
)

// tokenIdentities admits task tokens presented in Proxy-Authorization by clients outside the
// pool, caching each admitted token until it expires so only the first request pays for the
// signature check and the claim on its jti.
type tokenIdentities struct {
	admit func(ctx context.Context, raw string) (token.Task, error)
	now   func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]binding.Binding
}

const maxCachedTokens = 10000

func (t *tokenIdentities) lookup(ctx context.Context, raw string) (binding.Binding, error) {
	if t.admit == nil {
		return binding.Binding{}, fmt.Errorf("%w (this gateway accepts no task tokens from clients outside the pool)", binding.ErrUnknown)
	}
	key := sha256.Sum256([]byte(raw))
	now := t.now()
	t.mu.Lock()
	b, ok := t.cache[key]
	t.mu.Unlock()
	if ok {
		if !now.Before(b.Expires) {
			return binding.Binding{}, fmt.Errorf("%w: task token for %s expired at %s", binding.ErrUnknown, b.Task, b.Expires.UTC().Format(time.RFC3339))
		}
		return b, nil
	}
	task, err := t.admit(ctx, raw)
	if errors.Is(err, binding.ErrUnavailable) {
		return binding.Binding{}, err // the store is down: refused as such, its error recorded only
	}
	if err != nil {
		return binding.Binding{}, fmt.Errorf("%w: %v", binding.ErrUnknown, err)
	}
	b = binding.Binding{
		Lease: "token:" + task.JTI, Task: task.ID, Tenant: task.Tenant, Expires: task.Expires,
		Scopes: task.Scopes, Budget: task.Budget,
	}
	t.mu.Lock()
	if len(t.cache) >= maxCachedTokens {
		for k, v := range t.cache {
			if !now.Before(v.Expires) {
				delete(t.cache, k)
			}
		}
		if len(t.cache) >= maxCachedTokens {
			clear(t.cache)
		}
	}
	t.cache[key] = b
	t.mu.Unlock()
	return b, nil
}

// bearer returns the token in a "Proxy-Authorization: Bearer" header, if any.
func bearer(h http.Header) string {
	v := h.Get("Proxy-Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// identify finds who sent r: the lease bound to its source address, or, for a client outside
// the pool, the task token it presents (inherited from the CONNECT for intercepted requests). A
// sandbox's own binding always wins, so a token can never widen a sandbox's scopes.
func (p *Proxy) identify(r *http.Request, x *exchange, inherited string) error {
	raw := bearer(r.Header)
	if raw == "" {
		raw = inherited
	}
	return p.identifyAt(r.Context(), r.RemoteAddr, raw, x)
}

// identifyAt is identify for a client at remote ("host:port") presenting the task token raw
// ("" for none).
func (p *Proxy) identifyAt(ctx context.Context, remote, raw string, x *exchange) error {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return refuse(http.StatusBadRequest, rule.BadRequest, "unreadable client address", "")
	}
	x.src = ap.Addr().Unmap()
	b, byToken, err := p.whoIs(ctx, x.src, raw)
	if byToken {
		x.bearer = raw
	}
	if err != nil {
		return err
	}
	x.b = b
	return nil
}

// whoIs finds the lease of a client at src presenting the task token raw ("" for none): the
// binding of its address, or, only when the address holds none, the token's (byToken). A
// request and the recheck of a held connection are identified by it alike: an address whose
// binding cannot be read (the store down) is refused, never identified by a token instead.
func (p *Proxy) whoIs(ctx context.Context, src netip.Addr, raw string) (b binding.Binding, byToken bool, err error) {
	b, err = p.cfg.Bindings.Lookup(ctx, src)
	if errors.Is(err, binding.ErrUnknown) && raw != "" {
		b, err = p.tokens.lookup(ctx, raw)
		return b, true, err
	}
	return b, false, err
}

// addrOf is the address in remote ("host:port"), or the zero address.
func addrOf(remote string) netip.Addr {
	ap, _ := netip.ParseAddrPort(remote)
	return ap.Addr().Unmap()
}
