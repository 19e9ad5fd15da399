#!/usr/bin/env bash
# Starts the Docker engine when none answers, in a session of its own, so a Ctrl-C at the terminal
# (which signals the whole foreground process group: `make up` and airlock with it) leaves the
# engine running for the next command. An engine still shutting down is waited for, not raced.
# DOCKER, DOCKERD, DOCKER_PIDFILE and DOCKERD_LOG name what it runs and where (the tests point
# them at stand-ins).
set -euo pipefail
docker=${DOCKER:-docker}
dockerd=${DOCKERD:-dockerd}
pidfile=${DOCKER_PIDFILE:-/var/run/docker.pid}
log=${DOCKERD_LOG:-/var/log/airlock-dockerd.log}

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

answers && exit 0
if [ -s "$pidfile" ]; then
	old=$(cat "$pidfile")
	if is_engine "$old"; then
		echo "engine: dockerd (pid $old) is running but not answering: waiting for it to finish starting or stopping"
		for _ in $(seq 1 120); do
			answers && exit 0
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
echo "engine: starting dockerd"
mkdir -p "$(dirname "$log")"
setsid "$dockerd" >"$log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
	answers && exit 0
	sleep 0.5
done
echo "engine: dockerd did not answer within 60s:" >&2
tail -20 "$log" >&2
exit 1
