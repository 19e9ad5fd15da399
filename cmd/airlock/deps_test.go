package main

import (
	"flag"
	"testing"

	"github.com/airlock-dev/airlock/internal/deptest"
)

var update = flag.Bool("update", false, "rewrite deps.txt with the command's dependencies")

// airlock links no server, so a client command starts in milliseconds: its dependencies are the
// list in deps.txt, none of them a container engine's, Kubernetes', Vault's, Redis's or
// Prometheus's client, nor the pool, the API's server, the token verifier, the gateway, the node
// or its configuration. The node's commands run in airlock-node (cli.HandOver).
func TestDependencies(t *testing.T) {
	deptest.Check(t, ".", "deps.txt", *update, deptest.ServerFamilies)
}
