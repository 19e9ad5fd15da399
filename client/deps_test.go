package client_test

import (
	"flag"
	"testing"

	"github.com/airlock-dev/airlock/internal/deptest"
)

var update = flag.Bool("update", false, "rewrite deps.txt with the package's dependencies")

// The Go client links no server: its dependencies are the list in deps.txt, none of them a
// container engine's, Kubernetes', Vault's, Redis's or Prometheus's client, nor the pool, the
// API's server, the token verifier, the gateway, the node or its configuration.
func TestDependencies(t *testing.T) {
	deptest.Check(t, ".", "deps.txt", *update, deptest.ServerFamilies)
}
