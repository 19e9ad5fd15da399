# Sourced by the peer benchmarks: a scratch directory removed on exit, and bg, which starts a
# server pinned to core 1 (the load generators use core 0) with its output in $work/NAME.log
# and stops it on exit.
work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
bg() { local name=$1; shift; taskset -c 1 "$@" >"$work/$name.log" 2>&1 & pids+=($!); }
