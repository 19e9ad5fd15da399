// Package node assembles one airlock node from its configuration: the sandbox network and
// firewall, the binding cache, the gateway, the resolver, the pool and the API, started in
// dependency order and stopped in reverse.
package node
