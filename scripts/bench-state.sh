#!/usr/bin/env bash
# make bench-state: the state that travels, measured through a whole node's API on the local
# engine, under runc and (where the engine has it) runsc, one node per runtime, in two parts,
# each a run of its own that writes its own measured section of docs/bench-state.md:
#   state: a snapshot of a running lease's workspace of 1, 100 and 1000 MiB of random bytes and
#     a lease restored from it; one snapshot of 1 and 100 MiB forked into 8 leases at once; and
#     each stage of a snapshot and a restore of 1000 MiB timed alone (tar in the sandbox, the
#     exec stream, the filter, SHA-256, AES-GCM, the staging file, the store's synced Put, Vault
#     transit);
#   pause: pause and resume of 1 and 100 MiB and what a pause keeps, under runsc both on a
#     template that keeps files and on one with snapshot.memory, whose pauses keep memory.
# PARTS (default "state pause") picks the parts; ROUNDS, PAUSE_ROUNDS, FORK_ROUNDS, SIZES,
# FORK_SIZES, PAUSE_SIZES and RUNTIMES change how much. Each part's tables go to stdout and
# replace its measured section (between its two "measured" markers); the prose around stays.
set -euo pipefail
cd "$(dirname "$0")/.."
# Built beside bin/airlock-agent (make build), which the node it runs mounts into its sandboxes.
go build -o bin/statebench ./bench/statebench
doc=docs/bench-state.md

# measure PART PHASES ROUNDS BEGIN END: runs the phases and writes their tables between BEGIN and END.
measure() {
	local part=$1 phases=$2 rounds=$3 begin=$4 end=$5
	if ! grep -qF "$begin" "$doc" || ! grep -qF "$end" "$doc"; then
		echo "$doc has no measured section for the part $part (the lines $begin and $end): nothing is measured for it" >&2
		return 1
	fi
	local args=(-phases "$phases" -rounds "$rounds" -fork-rounds "${FORK_ROUNDS:-3}" -sizes "${SIZES:-1,100,1000}"
		-pause-sizes "${PAUSE_SIZES:-1,100}" -fork-sizes "${FORK_SIZES:-1,100}" -fork 8)
	[ -n "${RUNTIMES:-}" ] && args+=(-runtimes "$RUNTIMES")
	local out
	out=$(bin/statebench "${args[@]}")
	echo "$out"
	local tables
	tables=$(mktemp)
	{
		echo "\`make bench-state\` (part $part), $(date -u +%Y-%m-%d), built from $(git describe --always --dirty 2>/dev/null || echo "an unknown revision"), on this machine, which other sessions share: the load averages say how busy it was."
		echo
		echo "$out"
	} >"$tables"
	awk -v begin="$begin" -v end="$end" -v tables="$tables" '
		$0 == begin { print; while ((getline line < tables) > 0) print line; skip = 1; next }
		$0 == end { skip = 0 }
		!skip { print }
	' "$doc" >"$doc.new"
	rm -f "$tables"
	mv "$doc.new" "$doc"
}

for part in ${PARTS:-state pause}; do
	case $part in
	state)
		measure state snapshot,fork,parts "${ROUNDS:-5}" \
			'<!-- measured: scripts/bench-state.sh writes from here -->' '<!-- measured: to here -->'
		;;
	pause)
		measure pause pause "${PAUSE_ROUNDS:-${ROUNDS:-5}}" \
			'<!-- measured pause: scripts/bench-state.sh writes from here -->' '<!-- measured pause: to here -->'
		;;
	*)
		echo "PARTS: $part is not state or pause" >&2
		exit 1
		;;
	esac
done
