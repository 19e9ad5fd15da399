#!/usr/bin/env bash
# make bench-dns: airlock's resolver against CoreDNS, Unbound and dnsmasq, each forwarding to the
# same loopback authoritative server and answering the same 100 allowed names from cache, with
# query logging on for all; then airlock on a mix of 70 % allowed, 20 % refused and 10 %
# tunnel-shaped names. Servers run on core 1, dnsperf on core 0 (-c 4 -q 200). Each configuration
# runs ROUNDS times in turn; medians are reported. qps comes from a plain run, p99 from a verbose
# run of the same length (per-query latencies). Table to stdout and docs/bench-dns.md.
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
if [ ${#need[@]} -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -x "$tools/coredns" ] || { echo "building CoreDNS v1.15.0 (about 6 minutes the first time)"; GOBIN="$tools" go install github.com/coredns/coredns@v1.15.0; }
go build -o "$tools/dnsbench" ./bench/dnsbench

. scripts/bench-lib.sh
waitdns() {
	for _ in $(seq 1 100); do
		dig +tries=1 +time=1 -p "$1" @127.0.0.1 n0.bench.test A >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "no DNS answer on port $1"; cat "$work"/*.log; exit 1
}
command -v dig >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnsutils >/dev/null

bg upstream "$tools/dnsbench" upstream -listen 127.0.0.1:15354
sleep 0.3
bg airlock "$tools/dnsbench" resolver -listen 127.0.0.1:15353 -upstream 127.0.0.1:15354 -audit "$work/airlock-audit"
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
for p in 15353 15355 15356 15357; do waitdns "$p"; done

for i in $(seq 0 99); do echo "n$i.bench.test A"; done >"$work/allowed.txt"
{
	for i in $(seq 0 69); do echo "n$i.bench.test A"; done
	for i in $(seq 0 19); do echo "n$i.refused.example A"; done
	for i in $(seq 0 9); do echo "$(head -c 24 /dev/urandom | base32 | tr -d '=' | tr 'A-Z' 'a-z').bench.test A"; done
} >"$work/mix.txt"

run() { # name port queryfile
	local out p99
	out=$(taskset -c 0 dnsperf -s 127.0.0.1 -p "$2" -d "$3" -c 4 -q 200 -l "$LEN" 2>&1)
	local qps lost
	qps=$(echo "$out" | awk '/Queries per second/ {print $4}')
	lost=$(echo "$out" | awk '/Queries lost/ {print $3}')
	p99=$(taskset -c 0 dnsperf -s 127.0.0.1 -p "$2" -d "$3" -c 4 -q 200 -l "$LEN" -v 2>/dev/null |
		awk '$1==">" {print $5}' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int(NR*0.99)]*1000000; else print 0}')
	echo "$1 $qps $p99 $lost" >>"$work/results"
}
for round in $(seq 1 "$ROUNDS"); do
	echo "round $round of $ROUNDS" >&2
	run airlock 15353 "$work/allowed.txt"
	run coredns 15355 "$work/allowed.txt"
	run unbound 15356 "$work/allowed.txt"
	run dnsmasq 15357 "$work/allowed.txt"
	run airlock-mix 15353 "$work/mix.txt"
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v n="$1" -v c="$2" '$1==n {print $c}' "$work/results" | median; }
report=$(
	printf '| server | names | qps | p99 µs | lost |\n|---|---|---|---|---|\n'
	for name in airlock coredns unbound dnsmasq airlock-mix; do
		names="100 allowed, cached"; [ "$name" = airlock-mix ] && names="70% allowed, 20% refused, 10% tunnel-shaped"
		printf '| %s | %s | %.0f | %.0f | %s |\n' "${name%-mix}" "$names" "$(col "$name" 2)" "$(col "$name" 3)" "$(col "$name" 4)"
	done
)
summary=$(
	echo
	echo "- airlock / CoreDNS qps: $(echo "scale=2; $(col airlock 2) / $(col coredns 2)" | bc -l)x"
	echo "- airlock / Unbound qps: $(echo "scale=2; $(col airlock 2) / $(col unbound 2)" | bc -l)x"
	echo "- airlock / dnsmasq qps: $(echo "scale=2; $(col airlock 2) / $(col dnsmasq 2)" | bc -l)x"
	echo "- audit records written by airlock: $(cat "$work"/airlock-audit/*.jsonl | wc -l)"
)
echo "$report"
echo "$summary"
{
	echo "# Resolver benchmark"
	echo
	echo "\`make bench-dns\` on $(nproc) cores, $(date -u +%Y-%m-%d); median of $ROUNDS rounds of ${LEN}s each, dnsperf 2.10"
	echo "\`-c 4 -q 200\` pinned to core 0, servers pinned to core 1, every server forwarding to the same"
	echo "loopback authoritative server and answering from its cache. Query logging is on for all:"
	echo "airlock writes its hash-chained audit record per query, CoreDNS its log plugin, Unbound"
	echo "log-queries, dnsmasq log-queries to a file. Versions: CoreDNS 1.15.0, Unbound 1.17.1, dnsmasq 2.90."
	echo
	echo "$report"
	echo "$summary"
} >docs/bench-dns.md
