// Package ca holds the deployment certificate authority the gateway uses to intercept TLS, and
// mints the per-host leaf certificates it presents to sandboxes.
package ca
