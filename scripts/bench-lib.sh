# Sourced by the peer benchmarks: a scratch directory removed on exit; bg, which starts a
# server under test pinned to core 1 with its output in $work/NAME.log and stops it on exit;
# and aside, the same for what serves the load (upstreams) on core 0, beside the load
# generators, so that the core under test does only the work being measured.
work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
oncore() { local core=$1 name=$2; shift 2; taskset -c "$core" "$@" >"$work/$name.log" 2>&1 & pids+=($!); eval "pid_$name=$!"; }
bg() { oncore 1 "$@"; }
aside() { oncore 0 "$@"; }
# waitport PORT NAME: waits up to 10 s for a listener on loopback PORT, else says whose it was
# and what it printed.
waitport() {
	for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
	echo "$2 never listened on port $1 within 10 s; it printed:" >&2
	cat "$work/$2.log" >&2 2>/dev/null || true
	exit 1
}
