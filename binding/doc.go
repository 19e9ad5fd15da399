// Package binding maps a sandbox's network address to the lease it holds, through an in-process
// cache kept current by the binding channel and backed by the shared store. The gateway and the
// resolver identify every packet through it.
package binding
