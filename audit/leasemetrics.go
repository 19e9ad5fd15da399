package audit

import "sync"

// maxLeaseSeries bounds the leases counted by name; denials of leases beyond it are counted
// under lease "other".
const maxLeaseSeries = 10000

// leaseCounts counts, for each live lease, the denials and flagged records the trail wrote: what
// an alert on one lease's denial spike needs. The writer feeds it from every record it writes,
// so no part of the request path does any more work for it; a lease's series goes when the
// record of its end is written, which keeps the series as few as the leases running. Package
// audit/auditmetrics serves them (FileSink.EachLease).
type leaseCounts struct {
	mu sync.Mutex
	m  map[leaseKey]*[2]uint64 // denials, flagged
}

type leaseKey struct{ tenant, lease string }

// observe counts r.
func (c *leaseCounts) observe(r *Record) {
	if r.Lease == "" {
		return
	}
	ended := r.Kind == KindLease && EventEnded(r.Event)
	if !ended && r.Decision != Deny && !r.Flagged {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := leaseKey{r.Tenant, r.Lease}
	if ended {
		delete(c.m, k)
		return
	}
	if c.m == nil {
		c.m = map[leaseKey]*[2]uint64{}
	}
	v := c.m[k]
	if v == nil {
		if len(c.m) >= maxLeaseSeries {
			k.lease = "other"
			if v = c.m[k]; v == nil {
				v = new([2]uint64)
				c.m[k] = v
			}
		} else {
			v = new([2]uint64)
			c.m[k] = v
		}
	}
	if r.Decision == Deny {
		v[0]++
	}
	if r.Flagged {
		v[1]++
	}
}

// each calls fn with each lease's counts, under the lock.
func (c *leaseCounts) each(fn func(tenant, lease string, denials, flagged uint64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.m {
		fn(k.tenant, k.lease, v[0], v[1])
	}
}
