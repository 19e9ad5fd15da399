// Package e2e tests airlock end to end against the real Docker engine, Redis, Vault, TLS and DNS:
// it runs bin/airlock up with a test configuration and attacks the invariants from inside real
// sandboxes. `make test` installs and starts everything these tests need.
package e2e
