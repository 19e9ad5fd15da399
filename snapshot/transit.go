package snapshot

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	vaultapi "github.com/hashicorp/vault/api"
)

// Transit is Keys over Vault's transit engine: each tenant has a key of its own there (an
// aes256-gcm96 key named KeyPrefix and the tenant's segment, made on its first snapshot), which
// never leaves Vault. A data key is made by transit/datakey/plaintext and unwrapped by
// transit/decrypt under the asking tenant's key only, so a data key wrapped for one tenant
// does not unwrap for another. Safe for concurrent use.
type Transit struct {
	client *vaultapi.Client
	mount  string
	prefix string
}

var _ Keys = (*Transit)(nil)

// TransitConfig configures a Transit.
type TransitConfig struct {
	// Client is a logged-in Vault client; the caller keeps its token renewed. Its token needs
	// update on MOUNT/datakey/plaintext/PREFIX* and MOUNT/decrypt/PREFIX*, and create and update
	// on MOUNT/keys/PREFIX* unless the operator makes each tenant's key beforehand.
	Client *vaultapi.Client
	// Mount is the transit engine's mount path; default "transit".
	Mount string
	// KeyPrefix begins every tenant's key name; default "airlock-snapshot-". It is
	// [A-Za-z0-9] then [A-Za-z0-9_-]: the tenant's part (see segment) follows it directly.
	KeyPrefix string
}

// DefaultTransitMount and DefaultKeyPrefix are TransitConfig's defaults.
const (
	DefaultTransitMount = "transit"
	DefaultKeyPrefix    = "airlock-snapshot-"
)

// NewTransit returns the Transit of cfg.
func NewTransit(cfg TransitConfig) (*Transit, error) {
	if cfg.Client == nil {
		return nil, errors.New("snapshot transit: no Vault client")
	}
	mount := strings.Trim(cfg.Mount, "/")
	if mount == "" {
		mount = DefaultTransitMount
	}
	for seg := range strings.SplitSeq(mount, "/") {
		if seg == "" || seg == "." || seg == ".." || !vaultChars(seg, false) {
			return nil, fmt.Errorf("snapshots.transit_mount: %q is not a Vault mount path (segments of [A-Za-z0-9_.-], none empty, \".\" or \"..\")", cfg.Mount)
		}
	}
	prefix := cfg.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if !vaultChars(prefix, true) || !vaultAlnum(prefix[0]) {
		return nil, fmt.Errorf("snapshot transit: key prefix %q is not [A-Za-z0-9] then [A-Za-z0-9_-]", prefix)
	}
	return &Transit{client: cfg.Client, mount: mount, prefix: prefix}, nil
}

// KeyName is the name of tenant's key in the transit engine (for an operator's policy, or to
// make it beforehand).
func (t *Transit) KeyName(tenant string) (string, error) {
	seg, err := segment("tenant", tenant)
	if err != nil {
		return "", fmt.Errorf("snapshot transit: %w", err)
	}
	return t.prefix + seg, nil
}

// String names the engine for errors: "vault transit at http://127.0.0.1:8200 (mount transit)".
func (t *Transit) String() string {
	return fmt.Sprintf("vault transit at %s (mount %s)", t.client.Address(), t.mount)
}

// DataKey returns a fresh 32-byte data key for tenant and its wrapped form ("vault:v1:..."),
// making tenant's key first if it has none.
func (t *Transit) DataKey(ctx context.Context, tenant string) (key, wrapped []byte, err error) {
	name, err := t.KeyName(tenant)
	if err != nil {
		return nil, nil, err
	}
	path := t.mount + "/datakey/plaintext/" + name
	s, err := t.client.Logical().WriteWithContext(ctx, path, map[string]any{"bits": dataKeySize * 8})
	if keyMissing(err) {
		if _, cerr := t.client.Logical().WriteWithContext(ctx, t.mount+"/keys/"+name, map[string]any{"type": "aes256-gcm96"}); cerr != nil {
			return nil, nil, t.failed("making key "+name, cerr)
		}
		s, err = t.client.Logical().WriteWithContext(ctx, path, map[string]any{"bits": dataKeySize * 8})
	}
	if err != nil {
		return nil, nil, t.failed("making a data key under key "+name, err)
	}
	key, err = plaintextOf(s)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: making a data key under key %s: %w", t, name, err)
	}
	c, _ := dataOf(s)["ciphertext"].(string)
	if !strings.HasPrefix(c, "vault:v") || len(c) > maxWrapped {
		clear(key)
		return nil, nil, fmt.Errorf("%s: making a data key under key %s: the answer holds no wrapped key", t, name)
	}
	return key, []byte(c), nil
}

// Unwrap returns the data key wrapped under tenant's key. It never makes a key: a tenant that
// has none has nothing to unwrap.
func (t *Transit) Unwrap(ctx context.Context, tenant string, wrapped []byte) ([]byte, error) {
	name, err := t.KeyName(tenant)
	if err != nil {
		return nil, err
	}
	// Checked before it reaches Vault: what a blob's header says is untrusted.
	if !strings.HasPrefix(string(wrapped), "vault:v") || len(wrapped) > maxWrapped || !printableASCII(wrapped) {
		return nil, fmt.Errorf("%s: unwrapping under key %s: the wrapped data key is not a transit ciphertext", t, name)
	}
	s, err := t.client.Logical().WriteWithContext(ctx, t.mount+"/decrypt/"+name, map[string]any{"ciphertext": string(wrapped)})
	if err != nil {
		return nil, t.failed("unwrapping a data key under key "+name, err)
	}
	key, err := plaintextOf(s)
	if err != nil {
		return nil, fmt.Errorf("%s: unwrapping a data key under key %s: %w", t, name, err)
	}
	return key, nil
}

// failed says what Vault said when doing failed, never what was sent: a refusal names Vault's
// status and errors; no answer, or one that says Vault cannot serve (5xx: sealed, standby,
// failing), wraps ErrKeysDown.
func (t *Transit) failed(doing string, err error) error {
	var re *vaultapi.ResponseError
	if errors.As(err, &re) {
		said := fmt.Sprintf("Vault answered %d: %s", re.StatusCode, strings.Join(re.Errors, "; "))
		if re.StatusCode >= 500 {
			return fmt.Errorf("%w: %s: %s: %s", ErrKeysDown, t, doing, said)
		}
		return fmt.Errorf("%s: %s: %s", t, doing, said)
	}
	return fmt.Errorf("%w: %s: %s: %v", ErrKeysDown, t, doing, err)
}

// keyMissing says whether err is the transit engine's answer for a key it does not have.
func keyMissing(err error) bool {
	var re *vaultapi.ResponseError
	if !errors.As(err, &re) || re.StatusCode != 400 {
		return false
	}
	for _, e := range re.Errors {
		if strings.Contains(e, "key not found") {
			return true
		}
	}
	return false
}

func dataOf(s *vaultapi.Secret) map[string]any {
	if s == nil {
		return nil
	}
	return s.Data
}

// plaintextOf decodes a transit answer's base64 "plaintext", a data key of dataKeySize bytes.
func plaintextOf(s *vaultapi.Secret) ([]byte, error) {
	p, _ := dataOf(s)["plaintext"].(string)
	key, err := base64.StdEncoding.DecodeString(p)
	if err != nil || len(key) != dataKeySize {
		clear(key)
		return nil, fmt.Errorf("the answer holds no %d-byte key", dataKeySize)
	}
	return key, nil
}

// vaultChars says whether s is of [A-Za-z0-9_-] (and '.', unless noDot).
func vaultChars(s string, noDot bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !vaultAlnum(c) && c != '_' && c != '-' && (noDot || c != '.') {
			return false
		}
	}
	return s != ""
}

func vaultAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}
