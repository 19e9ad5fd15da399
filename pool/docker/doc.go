// Package docker runs sandboxes as hardened containers on the local Docker engine, on one internal
// network per deployment whose only reachable host ports are the gateway's and the resolver's.
package docker
