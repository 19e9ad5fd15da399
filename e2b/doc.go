// Package e2b serves E2B's control plane and sandbox API (envd) on airlock's leases, so the
// unchanged E2B SDKs drive airlock sandboxes: a sandbox is a lease, its template a template,
// its timeout the lease's TTL, its network options the task's scopes. Every call is made
// through the node's own API as the caller's API key, so tenants, rate limits, forwarding to
// the node that holds a lease and the audit trail are the API's.
package e2b
