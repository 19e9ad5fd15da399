#!/usr/bin/env bash
# make bench-dns: airlock's resolver against CoreDNS, Unbound and dnsmasq, each forwarding to the
# same loopback authoritative server and answering the same 100 allowed names from cache, with
# query logging on for all; then airlock on a mix of 70 % allowed, 20 % refused and 10 %
# tunnel-shaped names. As in the gateway benchmark, each server under test runs alone on core 1;
# the authoritative upstream and dnsperf (-c 4 -q 200) run on core 0. BEFORE=<git revision> also
# runs that revision's resolver (built in a work tree of its own) as airlock-before, on both
# query files, side by side. Each configuration runs ROUNDS times in turn; medians are reported.
# qps and the server's CPU use come from a plain run, p99 from a verbose run of the same length
# (per-query latencies). Table to stdout and docs/bench-dns.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
tools="$cache/tools"
ROUNDS=${ROUNDS:-3}
LEN=${LEN:-8}
mkdir -p "$tools"

need=()
command -v dnsperf >/dev/null || need+=(dnsperf)
command -v unbound >/dev/null || need+=(unbound)
command -v dnsmasq >/dev/null || need+=(dnsmasq-base)
command -v bc >/dev/null || need+=(bc)
command -v dig >/dev/null || need+=(dnsutils)
command -v taskset >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
	echo "bench-dns: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -x "$tools/coredns" ] || { echo "building CoreDNS v1.15.0 (about 6 minutes the first time)"; GOBIN="$tools" go install github.com/coredns/coredns@v1.15.0; }
go build -o "$tools/dnsbench" ./bench/dnsbench
servers=(airlock)
if [ -n "${BEFORE:-}" ]; then
	wt=$(mktemp -d)
	git worktree add --detach "$wt" "$BEFORE" >/dev/null
	built=0
	(cd "$wt" && go build -o "$tools/dnsbench-before" ./bench/dnsbench) && built=1
	git worktree remove --force "$wt"
	[ "$built" = 1 ] || { echo "bench-dns: $BEFORE's dnsbench did not build" >&2; exit 1; }
	servers+=(airlock-before)
fi

. scripts/bench-lib.sh
waitdns() {
	for _ in $(seq 1 100); do
		dig +tries=1 +time=1 -p "$1" @127.0.0.1 n0.bench.test A >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "no DNS answer on port $1"; cat "$work"/*.log; exit 1
}

# The upstream answers each name once (every server then answers from its cache), on the load's
# core, so the server's core does only the server's work.
aside upstream "$tools/dnsbench" upstream -listen 127.0.0.1:15354
waitdns 15354
bg airlock "$tools/dnsbench" resolver -listen 127.0.0.1:15353 -upstream 127.0.0.1:15354 -audit "$work/airlock-audit"
ports=(15353 15355 15356 15357)
if [ -n "${BEFORE:-}" ]; then
	bg airlock_before "$tools/dnsbench-before" resolver -listen 127.0.0.1:15358 -upstream 127.0.0.1:15354 -audit "$work/airlock-before-audit"
	ports+=(15358)
fi
cat >"$work/Corefile" <<CONF
.:15355 {
    bind 127.0.0.1
    forward . 127.0.0.1:15354
    cache 3600
    log
}
CONF
bg coredns "$tools/coredns" -conf "$work/Corefile"
cat >"$work/unbound.conf" <<CONF
server:
    interface: 127.0.0.1@15356
    port: 15356
    num-threads: 1
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "$work"
    logfile: "$work/unbound-queries.log"
    log-queries: yes
    use-syslog: no
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    module-config: "iterator"
    domain-insecure: "bench.test"
    msg-cache-size: 16m
    rrset-cache-size: 32m
forward-zone:
    name: "bench.test"
    forward-addr: 127.0.0.1@15354
CONF
bg unbound unbound -d -c "$work/unbound.conf"
bg dnsmasq dnsmasq -k -p 15357 --listen-address=127.0.0.1 --bind-interfaces --no-resolv --no-hosts \
	--server=127.0.0.1#15354 --log-queries --log-facility="$work/dnsmasq-queries.log" --cache-size=10000 --user=root --pid-file="$work/dnsmasq.pid"
for p in "${ports[@]}"; do waitdns "$p"; done

for i in $(seq 0 99); do echo "n$i.bench.test A"; done >"$work/allowed.txt"
{
	for i in $(seq 0 69); do echo "n$i.bench.test A"; done
	for i in $(seq 0 19); do echo "n$i.refused.example A"; done
	for i in $(seq 0 9); do echo "$(head -c 24 /dev/urandom | base32 | tr -d '=' | tr 'A-Z' 'a-z').bench.test A"; done
} >"$work/mix.txt"

# cpu PID: the process's user and system time so far, in clock ticks.
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
run() { # name pid port queryfile
	local out p99 before after
	before=$(cpu "$2")
	out=$(taskset -c 0 dnsperf -s 127.0.0.1 -p "$3" -d "$4" -c 4 -q 200 -l "$LEN" 2>&1)
	after=$(cpu "$2")
	local qps lost busy
	qps=$(echo "$out" | awk '/Queries per second/ {print $4}')
	lost=$(echo "$out" | awk '/Queries lost/ {print $3}')
	# The share of its core the server used: below 100 %, the load, not the server, set the pace.
	busy=$(echo "100 * ($after - $before) / $(getconf CLK_TCK) / $LEN" | bc -l)
	p99=$(taskset -c 0 dnsperf -s 127.0.0.1 -p "$3" -d "$4" -c 4 -q 200 -l "$LEN" -v 2>/dev/null |
		awk '$1==">" {print $5}' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int(NR*0.99)]*1000000; else print 0}')
	echo "$1 $qps $p99 $lost $busy" >>"$work/results"
}
for round in $(seq 1 "$ROUNDS"); do
	echo "round $round of $ROUNDS" >&2
	run airlock "$pid_airlock" 15353 "$work/allowed.txt"
	if [ -n "${BEFORE:-}" ]; then run airlock-before "$pid_airlock_before" 15358 "$work/allowed.txt"; fi
	run coredns "$pid_coredns" 15355 "$work/allowed.txt"
	run unbound "$pid_unbound" 15356 "$work/allowed.txt"
	run dnsmasq "$pid_dnsmasq" 15357 "$work/allowed.txt"
	run airlock-mix "$pid_airlock" 15353 "$work/mix.txt"
	if [ -n "${BEFORE:-}" ]; then run airlock-before-mix "$pid_airlock_before" 15358 "$work/mix.txt"; fi
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v n="$1" -v c="$2" '$1==n {print $c}' "$work/results" | median; }
names=("${servers[@]}" coredns unbound dnsmasq)
for n in "${servers[@]}"; do names+=("$n-mix"); done
report=$(
	printf '| server | names | qps | p99 µs | lost | server CPU %% |\n|---|---|---|---|---|---|\n'
	for name in "${names[@]}"; do
		q="100 allowed, cached"; [ "${name%-mix}" != "$name" ] && q="70% allowed, 20% refused, 10% tunnel-shaped"
		printf '| %s | %s | %.0f | %.0f | %s | %.0f |\n' "${name%-mix}" "$q" "$(col "$name" 2)" "$(col "$name" 3)" "$(col "$name" 4)" "$(col "$name" 5)"
	done
)
ratio() { echo "scale=2; $(col "$1" "$3") / $(col "$2" "$3")" | bc -l; }
summary=$(
	echo
	for peer in coredns unbound dnsmasq; do
		echo "- airlock / $peer: qps $(ratio airlock $peer 2)x, p99 $(ratio airlock $peer 3)x"
	done
	if [ -n "${BEFORE:-}" ]; then
		echo "- airlock / airlock-before ($BEFORE): qps $(ratio airlock airlock-before 2)x cached, $(ratio airlock-mix airlock-before-mix 2)x mixed"
	fi
	echo "- audit records written by airlock: $(cat "$work"/airlock-audit/*.jsonl | wc -l)"
)
echo "$report"
echo "$summary"
{
	echo "# Resolver benchmark"
	echo
	echo "\`make bench-dns\` on $(nproc) cores, $(date -u +%Y-%m-%d); median of $ROUNDS rounds of ${LEN}s each, dnsperf 2.10"
	echo "\`-c 4 -q 200\` and the loopback authoritative upstream pinned to core 0, each server alone on core 1"
	echo "(as in the gateway benchmark), every server forwarding to that upstream and answering from its"
	echo "cache. Query logging is on for all:"
	echo "airlock writes its hash-chained audit record per query, CoreDNS its log plugin, Unbound"
	echo "log-queries, dnsmasq log-queries to a file. Versions: CoreDNS 1.15.0, Unbound 1.17.1, dnsmasq 2.90."
	echo "qps comes from a plain run, p99 from a verbose run of the same length (per-query latencies);"
	echo "server CPU % is the share of core 1 the server used during the qps run (near 100: the server,"
	echo "not the load, set the pace). Command:"
	echo
	echo "    ${CMD:-make bench-dns}"
	echo
	echo "$report"
	echo "$summary"
} >docs/bench-dns.md
