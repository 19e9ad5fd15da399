#!/usr/bin/env bash
# make bench-pool: warm lease latency through the real API, token verification and Redis at 1,
# 10 and 50 concurrent clients; cold start and memory per idle sandbox of each shipped image on
# the local engine.
# The table goes to stdout and to docs/bench-pool.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(go run ./bench/poolbench -n "${LEASES:-400}" -cold "${COLD:-10}")
echo "$out"
{
	echo "# Pool benchmark"
	echo
	echo "\`make bench-pool\` on $(nproc) cores, $(date -u +%Y-%m-%d). Warm leases go through the HTTP API"
	echo "(pre-minted EdDSA task tokens, verified per lease), the atomic claim, the lease and binding"
	echo "write with its announcement in a real redis-server, and the node's binding cache, which holds"
	echo "the binding before the lease returns. The lease path makes no Docker call, so those sandboxes"
	echo "are registered by a runtime that starts nothing; cold starts are real hardened containers."
	echo
	echo "$out"
} >docs/bench-pool.md
