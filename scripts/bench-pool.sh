#!/usr/bin/env bash
# make bench-pool: cold start and memory per idle sandbox of each shipped image on the local
# engine, under runc and (the default image) under runsc; a whole node with real warm sandboxes
# under each runtime: warm leases and their first exec at 1 and 10 clients, and the gateway's
# added latency seen from inside a sandbox; the lease path alone (API, token verification,
# Redis) at 1, 10 and 50 clients; and the runsc/runc ratio of each figure.
# The tables go to stdout and to docs/bench-pool.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl >/dev/null
# Built beside bin/airlock-agent (make build), which the node it runs mounts into its sandboxes.
go build -o bin/poolbench ./bench/poolbench
out=$(bin/poolbench -n "${LEASES:-400}" -cold "${COLD:-20}" -node -rounds "${ROUNDS:-3}" -warm "${WARM:-10}" -requests "${REQUESTS:-50}")
echo "$out"
{
	echo "# Pool benchmark"
	echo
	echo "\`make bench-pool\` on $(nproc) cores, $(date -u +%Y-%m-%d). Cold starts are real hardened containers,"
	echo "one after another. The whole-node tables come from a node run in the benchmark's process with"
	echo "the dev stack (Redis, a Vault dev server, the demo upstream) and real warm sandboxes under"
	echo "each runtime: a lease goes through the HTTP API (the dev issuer mints its token), and its"
	echo "first exec runs \`true\` in the sandbox, through its exec agent. The gateway's added latency is the same HTTPS GET"
	echo "with curl from inside a sandbox through the gateway (which injects the demo credential) less"
	echo "the host's own curl straight to the upstream, loading the same CA bundle. The lease path"
	echo "alone is the HTTP API, pre-minted EdDSA task tokens verified per lease, the atomic claim and"
	echo "the binding write and announcement in a real redis-server, over sandboxes registered by a"
	echo "runtime that starts nothing: the lease path makes no Docker call."
	echo
	echo "$out"
} >docs/bench-pool.md
