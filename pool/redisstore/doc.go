// Package redisstore keeps pool state in Redis: warm sets, leases and the address bindings the
// gateway and resolver follow, with changes announced on a channel.
package redisstore
