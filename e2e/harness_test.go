package e2e

import (
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/wait"
)

// The harness is split by what it serves: harness_upstream_test.go the upstream the sandboxes
// talk to, harness_tls_test.go its certificates and the API's, harness_token_test.go the test
// issuer, harness_node_test.go a node's configuration and process, harness_cli_test.go the CLI,
// harness_trail_test.go the audit trail, harness_vault_test.go the node's Vault,
// harness_docker_test.go the engine and what a node leaves on the host, and
// harness_snapshot_test.go the node's snapshot store and its second tenant. This file holds what
// every test waits with. The tests are in one file per invariant.

var airlockBin = func() string { p, _ := filepath.Abs("../bin/airlock"); return p }()

// waitUntil is wait.Until.
var waitUntil = wait.Until

// eventually is wait.For.
var eventually = wait.For
