// Package ratelimit keeps one token bucket per key (a sandbox address, an API key), bounded in
// memory.
package ratelimit
