package pool

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
)

// SetSizingClock makes m's pool sizing read the time from now, for tests that drive a pool
// through minutes of idling.
func SetSizingClock(m *Manager, now func() time.Time) {
	m.queue.Lock()
	m.now = now
	m.queue.Unlock()
}

// Started is closed once m's Run has swept the store and the runtime at start.
func Started(m *Manager) <-chan struct{} { return m.started }

// Refilled waits until a refill pass of m's template that began after the call has ended: what
// the refill would do now, it has done (or not).
func Refilled(t testing.TB, m *Manager, template string) {
	t.Helper()
	pass := m.passes.fills[template]
	after := pass.begun.Load() + 1 // passes end in the order they begin: fillAll runs one at a time
	m.kick(template)
	wait.For(t, 10*time.Second, "a refill pass of "+template+" begun after this point", func() bool { return pass.ended.Load() >= after })
}

// WaitingForStart is how many calls of m's wait for its Run to start the node.
func WaitingForStart(m *Manager) int32 { return m.startWaiters.Load() }

// HealthChecks is how many rounds of health checks m has ended.
func HealthChecks(m *Manager) uint64 { return m.passes.checks.Load() }

// ReapPaused runs one pass of m's expiry of paused leases (and retention) over tenants.
func ReapPaused(m *Manager, tenants ...string) { m.reapPaused(context.Background(), tenants) }
