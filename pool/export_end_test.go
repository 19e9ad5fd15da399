package pool

import (
	"context"

	"github.com/airlock-dev/airlock/audit"
)

// EndAsRelease ends l as a release does, from l as it was read: what a release that read the
// lease before a pause or an expiry ended it goes on to do.
func EndAsRelease(m *Manager, l Lease) error {
	return m.leaseTable.end(context.Background(), l, audit.EventRelease)
}

// CutOnly begins l's end as a release does and goes no further: l is unbound and its end
// journaled, as a node that stopped at once after that would leave it.
func CutOnly(m *Manager, l Lease) error {
	return m.leaseTable.cut(context.Background(), l, audit.EventRelease)
}
