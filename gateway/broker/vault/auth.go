package vault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/gateway/broker"
)

// Auth says how the gateway logs in to Vault.
type Auth struct {
	// Method is "token" (the default: Config.Token, renewed if renewable) or "approle".
	Method string
	// AppRole: files holding the role id and the secret id. With SecretIDWrapped the secret id
	// file holds a response-wrapping token, unwrapped once at first login.
	RoleIDFile, SecretIDFile string
	SecretIDWrapped          bool
	// Mount is the auth mount; empty means "approle", "jwt" or "kubernetes" by method.
	Mount string
	// JWT and Kubernetes: the role to log in as and the file holding the JWT (for Kubernetes,
	// empty means the pod's service account token). Re-read at every login, since it rotates.
	Role    string
	JWTFile string
}

// Login obtains the gateway's own token: it checks a configured token, or logs in with AppRole.
func (b *Broker) Login(ctx context.Context) error {
	s, err := b.login(ctx)
	if err != nil {
		return err
	}
	b.authSecret.Store(s)
	return nil
}

func (b *Broker) login(ctx context.Context) (*vaultapi.Secret, error) {
	switch b.auth.Method {
	case "", "token":
		if b.token == "" {
			return nil, errors.New("vault: no token (VAULT_TOKEN or vault.token_file)")
		}
		b.client.SetToken(b.token)
		s, err := b.client.Auth().Token().LookupSelfWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("vault: the configured token does not work: %w", err)
		}
		return s, nil
	case "approle":
		roleID, err := readTrim(b.auth.RoleIDFile)
		if err != nil {
			return nil, fmt.Errorf("vault approle: role id: %w", err)
		}
		secretID, err := b.secretID(ctx)
		if err != nil {
			return nil, err
		}
		mount := b.auth.Mount
		if mount == "" {
			mount = "approle"
		}
		return b.loginWith(ctx, "auth/"+mount+"/login", map[string]any{"role_id": roleID, "secret_id": secretID})
	case "jwt", "kubernetes":
		file := b.auth.JWTFile
		if file == "" && b.auth.Method == "kubernetes" {
			file = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}
		jwt, err := readTrim(file)
		if err != nil {
			return nil, fmt.Errorf("vault %s login: reading the JWT: %w", b.auth.Method, err)
		}
		mount := b.auth.Mount
		if mount == "" {
			mount = b.auth.Method
		}
		return b.loginWith(ctx, "auth/"+mount+"/login", map[string]any{"role": b.auth.Role, "jwt": jwt})
	default:
		return nil, fmt.Errorf("vault: auth method %q is not token, approle, jwt or kubernetes", b.auth.Method)
	}
}

// loginWith writes credentials to an auth method's login path and adopts the token it returns.
func (b *Broker) loginWith(ctx context.Context, path string, data map[string]any) (*vaultapi.Secret, error) {
	c, err := b.client.Clone()
	if err != nil {
		return nil, err
	}
	c.ClearToken()
	s, err := c.Logical().WriteWithContext(ctx, path, data)
	if err != nil {
		return nil, fmt.Errorf("vault login at %s: %w", path, err)
	}
	if s == nil || s.Auth == nil {
		return nil, fmt.Errorf("vault login at %s returned no token", path)
	}
	b.client.SetToken(s.Auth.ClientToken)
	return s, nil
}

// secretID reads the AppRole secret id, unwrapping it the first time when it came wrapped (a
// wrapping token works once, so the unwrapped value is kept for re-logins).
func (b *Broker) secretID(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unwrapped != "" {
		return b.unwrapped, nil
	}
	v, err := readTrim(b.auth.SecretIDFile)
	if err != nil {
		return "", fmt.Errorf("vault approle: secret id: %w", err)
	}
	if !b.auth.SecretIDWrapped {
		return v, nil
	}
	c, err := b.client.Clone()
	if err != nil {
		return "", err
	}
	s, err := c.Logical().UnwrapWithContext(ctx, v)
	if err != nil {
		return "", fmt.Errorf("vault approle: unwrapping the secret id (a wrapping token works once): %w", err)
	}
	id, _ := s.Data["secret_id"].(string)
	if id == "" {
		return "", errors.New("vault approle: the wrapped response holds no secret_id")
	}
	b.unwrapped = id
	return id, nil
}

func hasAny(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if h == w {
				return true
			}
		}
	}
	return false
}

func readTrim(path string) (string, error) {
	if path == "" {
		return "", errors.New("no file configured")
	}
	v, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(v)), nil
}

// Run keeps the gateway's token alive until ctx ends: it renews a renewable token with a
// LifetimeWatcher and logs in again when renewal stops (max TTL reached, token revoked, Vault
// away), retrying with backoff. Requests meanwhile fail with 503 for credentials not cached.
func (b *Broker) Run(ctx context.Context) {
	log := b.log
	go b.revoker(ctx)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				b.refreshKV(ctx)
			}
		}
	}()
	backoff := time.Second
	for ctx.Err() == nil {
		s, _ := b.authSecret.Load().(*vaultapi.Secret)
		if s == nil {
			var err error
			if s, err = b.login(ctx); err != nil {
				log.Error("vault login failed; retrying", "err", err, "in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, time.Minute)
				continue
			}
			b.authSecret.Store(s)
			b.logins.Add(1)
			log.Info("logged in to vault", "method", b.auth.Method)
		}
		backoff = time.Second
		if ok, _ := s.TokenIsRenewable(); !ok {
			// A token that cannot be renewed (a dev root token) just lives until it expires;
			// check it now and then, and log in again when it is gone.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Minute):
			}
			if _, err := b.client.Auth().Token().LookupSelfWithContext(ctx); err != nil {
				b.authSecret.Store((*vaultapi.Secret)(nil))
			}
			continue
		}
		w, err := b.client.NewLifetimeWatcher(&vaultapi.LifetimeWatcherInput{Secret: s})
		if err != nil {
			b.authSecret.Store((*vaultapi.Secret)(nil))
			continue
		}
		go w.Start()
		stop := false
		for !stop {
			select {
			case <-ctx.Done():
				w.Stop()
				return
			case err := <-w.DoneCh():
				if err != nil {
					log.Warn("vault token renewal stopped; logging in again", "err", err)
				}
				stop = true
			case <-w.RenewCh():
				b.renewals.Add(1)
			}
		}
		w.Stop()
		b.authSecret.Store((*vaultapi.Secret)(nil))
	}
}

// CheckCatalog reads every catalog entry once with the gateway's own token and returns, by
// name, why the ones that cannot be served are broken. The rest keep working either way.
func (b *Broker) CheckCatalog(ctx context.Context, c broker.Catalog) map[string]error {
	out := map[string]error{}
	for name, e := range c {
		var err error
		switch e.Source.Kind {
		case broker.SourceToken, broker.SourcePKI, broker.SourceDynamic:
			// Minted per lease, so not minted here: check that the gateway's own policy allows
			// the call that mints it.
			path, need := e.Source.Path, []string{"read"}
			switch e.Source.Kind {
			case broker.SourceToken:
				path, need = "auth/token/create/"+e.Source.Role, []string{"update", "create"}
			case broker.SourcePKI:
				path, need = e.Source.Mount+"/issue/"+e.Source.Role, []string{"update", "create"}
			}
			var caps []string
			if caps, err = b.client.Sys().CapabilitiesSelfWithContext(ctx, path); err == nil && !hasAny(caps, append(need, "root", "sudo")) {
				err = fmt.Errorf("the gateway's policy has %v on %s, it needs %s", caps, path, strings.Join(need, " or "))
			}
			if err != nil {
				err = fmt.Errorf("%w: credential %q: %v", broker.ErrUnavailable, name, err)
			}
		default:
			_, err = b.Get(ctx, broker.Lease{}, e)
		}
		if err != nil {
			out[name] = err
		}
	}
	return out
}
