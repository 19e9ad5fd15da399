package config

import (
	"time"
)

// Vault is the credential source.
type Vault struct {
	// Address of an external Vault; empty runs a private dev server seeded with the demo secret.
	Address   string `yaml:"address"`
	TokenFile string `yaml:"token_file"`
	// Binary is the vault executable for the dev server; empty looks beside airlock, then PATH.
	Binary string    `yaml:"binary"`
	Auth   VaultAuth `yaml:"auth"`
	// RevokeRetryFor is how long a revocation of per-lease material that keeps failing is
	// retried before it is given up (recorded in the audit trail; the material still expires
	// with its lease). 0 means 24h.
	RevokeRetryFor time.Duration `yaml:"revoke_retry_for"`
}

// VaultAuth is how the gateway logs in to an external Vault.
type VaultAuth struct {
	// Method is "token" (token_file or VAULT_TOKEN) or "approle".
	Method          string `yaml:"method"`
	RoleIDFile      string `yaml:"role_id_file"`
	SecretIDFile    string `yaml:"secret_id_file"`
	SecretIDWrapped bool   `yaml:"secret_id_wrapped"` // the file holds a response-wrapping token
	Mount           string `yaml:"mount"`             // the auth mount; default: the method's name
	// Role and JWTFile are for the jwt and kubernetes methods (kubernetes defaults to the pod's
	// service account token).
	Role    string `yaml:"role"`
	JWTFile string `yaml:"jwt_file"`
}

func (v Vault) validate(bad badFunc) {
	v.Auth.validate(bad)
	if v.RevokeRetryFor < 0 {
		bad("vault.revoke_retry_for", "must be >= 0")
	}
}

// validate checks that the login method is known and has what it needs.
func (a VaultAuth) validate(bad badFunc) {
	switch a.Method {
	case "", "token":
	case "approle":
		if a.RoleIDFile == "" || a.SecretIDFile == "" {
			bad("vault.auth", "approle needs role_id_file and secret_id_file")
		}
	case "jwt", "kubernetes":
		if a.Role == "" {
			bad("vault.auth.role", "required for %s login", a.Method)
		}
		if a.Method == "jwt" && a.JWTFile == "" {
			bad("vault.auth.jwt_file", "required for jwt login")
		}
	default:
		bad("vault.auth.method", "%q is not token, approle, jwt or kubernetes", a.Method)
	}
}
