// Package devstack runs the private dependencies of the all-in-one dev node: a redis-server on a
// unix socket in the state dir, a Vault dev server seeded with the demo credential, and the demo
// upstream that checks it. Every process it starts stops when its context ends.
package devstack
