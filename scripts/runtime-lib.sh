# Sourced by runsc.sh and crun.sh: what registering an OCI runtime with the Docker engine shares.
# The caller sets docker (the client), pidfile (dockerd's) and daemon_json, and runs from the
# checkout's root.

# engine_lists WHO CHANGED NAME...: makes the engine list the runtimes NAME... that the caller
# registered in daemon_json. A running engine reloads the file on SIGHUP (never a restart), and
# only when CHANGED is 1 or it does not list them yet; one that is not running is started by
# engine.sh and reads it. Waits up to 30 s for the names, saying so (as WHO) when they do not
# appear; returns 0 once they do.
engine_lists() {
	local who=$1 changed=$2
	shift 2
	if "$docker" info >/dev/null 2>&1; then
		if [ "$changed" = 1 ] || ! runtimes_listed "$@"; then
			local pid
			pid=$(cat "$pidfile" 2>/dev/null || pidof "$(basename -- "${DOCKERD:-dockerd}")" || true)
			[ -n "$pid" ] || { echo "$who: the engine answers but its pid is not known; reload it yourself (SIGHUP to dockerd)" >&2; return 1; }
			kill -HUP "$pid"
		fi
	else
		scripts/engine.sh
	fi
	for _ in $(seq 1 60); do
		runtimes_listed "$@" && return 0
		sleep 0.5
	done
	echo "$who: the engine does not list the runtimes $* 30 s after reading $daemon_json" >&2
	return 1
}

# runtimes_listed NAME...: whether the engine lists every runtime named.
runtimes_listed() {
	local have n
	have=$("$docker" info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null) || return 1
	for n in "$@"; do
		[[ " $have " == *" $n "* ]] || return 1
	done
}
