#!/usr/bin/env bash
# Starts the Docker engine when none answers, in a session of its own, so a Ctrl-C at the terminal
# (which signals the whole foreground process group: `make up` and airlock with it) leaves the
# engine running for the next command. An engine still shutting down is waited for, not raced.
# The engine runs in experimental mode: its checkpoint API, which pausing a gVisor sandbox with
# its memory needs, is there only then (--experimental, unless daemon.json sets it; dockerd
# refuses a setting given both ways). An engine already running without it is left running,
# with a note: experimental mode is read only at start, and a restart would stop its sandboxes.
# DOCKER, DOCKERD, DOCKER_PIDFILE, DOCKERD_LOG and DOCKER_DAEMON_JSON name what it runs and
# where (the tests point them at stand-ins).
set -euo pipefail
docker=${DOCKER:-docker}
dockerd=${DOCKERD:-dockerd}
pidfile=${DOCKER_PIDFILE:-/var/run/docker.pid}
log=${DOCKERD_LOG:-/var/log/airlock-dockerd.log}
daemon_json=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}

answers() { "$docker" info >/dev/null 2>&1; }
# is_engine PID: that process is alive and is a dockerd, run directly or by an interpreter (a
# pid file can outlive its process and its pid be reused by another).
is_engine() {
	[ -r "/proc/$1/cmdline" ] || return 1
	local arg n=0
	while IFS= read -r -d '' arg && [ $n -lt 2 ]; do
		[ "$(basename -- "$arg")" = "$(basename -- "$dockerd")" ] && return 0
		n=$((n + 1))
	done < <(head -c 4096 "/proc/$1/cmdline")
	return 1
}

# running: a note when the engine cannot checkpoint, never a failure.
running() {
	if [ "$("$docker" info --format '{{.ExperimentalBuild}}' 2>/dev/null)" != true ]; then
		echo "engine: dockerd runs without experimental mode, so pausing a gVisor sandbox keeps its files only (the checkpoint API needs it); restart dockerd when no sandbox needs it and run this again, which starts it with --experimental" >&2
	fi
	exit 0
}

answers && running
if [ -s "$pidfile" ]; then
	old=$(cat "$pidfile")
	if is_engine "$old"; then
		echo "engine: dockerd (pid $old) is running but not answering: waiting for it to finish starting or stopping"
		for _ in $(seq 1 120); do
			answers && running
			is_engine "$old" || break
			sleep 0.5
		done
		if is_engine "$old"; then
			echo "engine: dockerd (pid $old) still does not answer after 60s; stop it, then run this again" >&2
			exit 1
		fi
	fi
	rm -f "$pidfile" # left by an engine that is gone
fi
args=()
grep -qs '"experimental"' "$daemon_json" || args+=(--experimental)
echo "engine: starting dockerd ${args[*]}"
mkdir -p "$(dirname "$log")"
setsid "$dockerd" "${args[@]}" >"$log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
	answers && exit 0
	sleep 0.5
done
echo "engine: dockerd did not answer within 60s:" >&2
tail -20 "$log" >&2
exit 1
