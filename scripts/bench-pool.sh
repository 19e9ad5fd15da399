#!/usr/bin/env bash
# make bench-pool: cold start and memory per idle sandbox of each shipped image on the local
# engine, under runc and (the default image) under crun and runsc where the engine has them; the
# engine's sandbox throughput at 1 to 8 creations at once (what the refill's parallel bound is
# chosen by), under runc and crun (ENGINE_RUNTIMES); a whole node with real
# warm sandboxes under each runtime: warm leases and their first exec at 1 and 10 clients, and
# the gateway's added latency seen from inside a sandbox; bursts of 1, 8, 16 and 32 clients
# looping lease, `true`, release against `airlock up` on its embedded defaults (BEFORE=<git
# revision> also runs that revision's build, side by side, and its engine phase and cold
# starts of the default image); the lease path alone (API, token
# verification, Redis) at 1, 10 and 50 clients; and the runsc/runc ratio of each figure. With
# the test cluster up (make kube; KUBE_ENV names its env file), cold Pods per RuntimeClass,
# their idle memory and the whole node on the Kubernetes backend too, beside Docker's.
# The tables go to stdout and to docs/bench-pool.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl >/dev/null
# Built beside bin/airlock-agent (make build), which the node it runs mounts into its sandboxes.
go build -o bin/poolbench ./bench/poolbench
builds="after=bin/airlock"
if [ -n "${BEFORE:-}" ]; then
	# The earlier revision's airlock, built in a work tree of its own, beside its own agent.
	wt=$(mktemp -d)
	trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
	git worktree add --detach "$wt" "$BEFORE" >/dev/null
	# A revision since the client and the node were split has an airlock-node, which its airlock
	# hands `up` to.
	(cd "$wt" && go build -o bin/airlock ./cmd/airlock && CGO_ENABLED=0 go build -o bin/airlock-agent ./cmd/airlock-agent &&
		go build -o bin/poolbench ./bench/poolbench &&
		if [ -d cmd/airlock-node ]; then go build -o bin/airlock-node ./cmd/airlock-node; fi)
	ln -s "$PWD/bin/vault" "$wt/bin/vault" # airlock up runs the Vault dev server it finds beside itself
	builds="before=$wt/bin/airlock,$builds"
fi
# The container tier's runtimes whose throughput is measured: runc, and crun where the engine has it.
engine_rts=${ENGINE_RUNTIMES:-runc$(docker info --format '{{range $k, $v := .Runtimes}} {{$k}}{{end}}' 2>/dev/null | grep -qw crun && echo ,crun)}
engine=$(bin/poolbench -engine "${ENGINE:-1,2,4,8}" -engine-n "${ENGINE_N:-40}" -engine-runtimes "$engine_rts")
if [ -n "${BEFORE:-}" ]; then
	# The earlier revision's engine phase and cold starts of the default image (its poolbench,
	# beside its own agent), run here beside this one's.
	before_engine=$("$wt/bin/poolbench" -engine "${ENGINE:-1,2,4,8}" -engine-n "${ENGINE_N:-40}")
	before_cold=$("$wt/bin/poolbench" -cold "${COLD:-20}" -images airlock/default:latest -n 10 | grep -E '^airlock/|^Memory' || true)
	engine=$(printf 'before (%s):\n\n%s\n\n%s\n\nafter:\n\n%s' "$BEFORE" "$before_engine" "$before_cold" "$engine")
fi
echo "$engine"
kube=()
kube_env=${KUBE_ENV:-/var/lib/airlock/kube/env}
[ -f "$kube_env" ] && kube=(-kube "$kube_env")
out=$(bin/poolbench -n "${LEASES:-400}" -cold "${COLD:-20}" -node -rounds "${ROUNDS:-3}" -warm "${WARM:-10}" -requests "${REQUESTS:-50}" "${kube[@]}")
echo "$out"
burst=$(bin/poolbench -burst "$builds" -burst-for "${BURST_FOR:-60s}" -burst-levels "${BURST_LEVELS:-1,8,16,32}")
echo "$burst"
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
	echo "runtime that starts nothing: the lease path makes no Docker call. The bursts run \`airlock up\`"
	echo "itself, as a user would, each build in a state directory of its own."
	echo
	echo "$engine"
	echo
	echo "$out"
	echo
	echo "$burst"
} >docs/bench-pool.md
