#!/usr/bin/env bash
# make bench-state: the state that travels, measured through a whole node's API on the local
# engine, under runc and (where the engine has it) runsc, one node per runtime: a snapshot of a
# running lease's workspace of 1, 100 and 1000 MiB of random bytes and a lease restored from it;
# pause and resume of 1 and 100 MiB and what a pause keeps; one snapshot of 1 and 100 MiB forked
# into 8 leases at once; and each stage of a snapshot and a restore of 1000 MiB timed alone
# (tar in the sandbox, the exec stream, the filter, SHA-256, AES-GCM, the staging file, the
# store's synced Put, Vault transit). ROUNDS, FORK_ROUNDS, SIZES, FORK_SIZES, PAUSE_SIZES and
# RUNTIMES change how much. The tables go to stdout and replace the measured section of
# docs/bench-state.md (between its two "measured" markers); the prose around them stays.
set -euo pipefail
cd "$(dirname "$0")/.."
# Built beside bin/airlock-agent (make build), which the node it runs mounts into its sandboxes.
go build -o bin/statebench ./bench/statebench
args=(-rounds "${ROUNDS:-5}" -fork-rounds "${FORK_ROUNDS:-3}" -sizes "${SIZES:-1,100,1000}"
	-pause-sizes "${PAUSE_SIZES:-1,100}" -fork-sizes "${FORK_SIZES:-1,100}" -fork 8)
[ -n "${RUNTIMES:-}" ] && args+=(-runtimes "$RUNTIMES")
out=$(bin/statebench "${args[@]}")
echo "$out"
doc=docs/bench-state.md
begin='<!-- measured: scripts/bench-state.sh writes from here -->'
end='<!-- measured: to here -->'
if ! grep -qF "$begin" "$doc" || ! grep -qF "$end" "$doc"; then
	echo "$doc has no measured section (the lines $begin and $end): the tables are above, $doc is left as it is" >&2
	exit 1
fi
tables=$(mktemp)
trap 'rm -f "$tables"' EXIT
{
	echo "\`make bench-state\`, $(date -u +%Y-%m-%d), built from $(git describe --always --dirty 2>/dev/null || echo "an unknown revision"), on this machine, which other sessions share: the load averages say how busy it was."
	echo
	echo "$out"
} >"$tables"
awk -v begin="$begin" -v end="$end" -v tables="$tables" '
	$0 == begin { print; while ((getline line < tables) > 0) print line; skip = 1; next }
	$0 == end { skip = 0 }
	!skip { print }
' "$doc" >"$doc.new"
mv "$doc.new" "$doc"
