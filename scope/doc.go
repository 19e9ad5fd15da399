// Package scope parses a task's egress scopes and decides whether a destination falls inside them.
// The gateway and the resolver both use it, so a name is allowed by DNS exactly when some request
// to it could be allowed by the proxy.
package scope
