// Package pool keeps pre-warmed sandboxes per template, leases one to a task, and destroys it
// after. It defines the domain (Template, Sandbox, Lease) and the interfaces its adapters meet:
// Runtime (pool/docker) runs sandboxes, Store (pool/redisstore) shares pool state across nodes.
package pool
