package snapshot

import "context"

// Keys makes and unwraps the data keys snapshots are encrypted with: each snapshot has a fresh
// 256-bit data key, stored only wrapped under its tenant's key, which the node never holds
// (Vault's transit engine holds it: Transit). A key wrapped for one tenant does not unwrap for
// another, so a snapshot copied to another tenant's name cannot be read.
type Keys interface {
	// DataKey returns a fresh 32-byte data key for tenant, and the same key wrapped.
	DataKey(ctx context.Context, tenant string) (key, wrapped []byte, err error)
	// Unwrap returns the data key wrapped for tenant; an error when it was wrapped for another
	// tenant, or altered.
	Unwrap(ctx context.Context, tenant string, wrapped []byte) ([]byte, error)
}
