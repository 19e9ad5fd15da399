package pool

import "time"

// SetSizingClock makes m's pool sizing read the time from now, for tests that drive a pool
// through minutes of idling.
func SetSizingClock(m *Manager, now func() time.Time) {
	m.queue.Lock()
	m.now = now
	m.queue.Unlock()
}

// Started is closed once m's Run has swept the store and the runtime at start.
func Started(m *Manager) <-chan struct{} { return m.started }
