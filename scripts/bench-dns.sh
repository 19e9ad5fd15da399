#!/usr/bin/env bash
# make bench-dns: airlock's resolver against CoreDNS, Unbound and dnsmasq, each forwarding to the
# same loopback authoritative server and answering the same 100 allowed names from cache, with
# query logging on for all; then airlock on a mix of 70 % allowed, 20 % refused and 10 %
# tunnel-shaped names; and a bare reflector (dnsbench reflect: batched reads, segmented batched
# writes, one fixed answer, no DNS work): the qps the load reaches against a server doing nothing,
# as the gateway benchmark's bare relay is its floor. As in the gateway benchmark, each server under test runs alone on core 1;
# the authoritative upstream and dnsperf (-c 4 -q 200) run on core 0. BEFORE="<git revision> ..."
# also runs each revision's resolver (built in a work tree of its own) as airlock@<revision>, on
# both query files, side by side. Each configuration runs ROUNDS times in turn; medians are
# reported. qps, the server's CPU use and the load's core use come from a plain run, p99 from a
# verbose run of the same length (per-query latencies). Table to stdout and docs/bench-dns.md.
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
befores=()
for rev in ${BEFORE:-}; do
	wt=$(mktemp -d)
	git worktree add --detach "$wt" "$rev" >/dev/null
	built=0
	(cd "$wt" && go build -o "$tools/dnsbench-$rev" ./bench/dnsbench) && built=1
	git worktree remove --force "$wt"
	[ "$built" = 1 ] || { echo "bench-dns: $rev's dnsbench did not build" >&2; exit 1; }
	befores+=("$rev")
	servers+=("airlock@$rev")
done

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
declare -A port pid trail
port[airlock]=15353
trail[airlock]=$work/airlock-audit
for i in "${!befores[@]}"; do
	rev=${befores[$i]}
	port[airlock@$rev]=$((15360 + i))
	bg "airlock_before_$i" "$tools/dnsbench-$rev" resolver -listen "127.0.0.1:$((15360 + i))" -upstream 127.0.0.1:15354 -audit "$work/airlock-$rev-audit"
	pvar="pid_airlock_before_$i"
	pid[airlock@$rev]=${!pvar}
	trail[airlock@$rev]=$work/airlock-$rev-audit
	ports+=($((15360 + i)))
done
pid[airlock]=$pid_airlock
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
bg reflect "$tools/dnsbench" reflect -listen 127.0.0.1:15359
ports+=(15359)
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
# core0: core 0's busy and total time so far, in clock ticks (everything but idle and iowait).
core0() { awk '$1=="cpu0" {t=0; for (i=2; i<=NF; i++) t+=$i; print t-$5-$6, t}' /proc/stat; }
run() { # name pid port queryfile
	local out p99 before after c0 c1
	before=$(cpu "$2")
	c0=$(core0)
	out=$(taskset -c 0 dnsperf -s 127.0.0.1 -p "$3" -d "$4" -c 4 -q 200 -l "$LEN" 2>&1)
	c1=$(core0)
	after=$(cpu "$2")
	local qps lost busy load us
	qps=$(echo "$out" | awk '/Queries per second/ {print $4}')
	lost=$(echo "$out" | awk '/Queries lost/ {print $3}')
	# The share of its core the server used: below 100 %, the load, not the server, set the pace.
	busy=$(echo "100 * ($after - $before) / $(getconf CLK_TCK) / $LEN" | bc -l)
	# The share of core 0 the load (dnsperf, and the kernel's delivery of its queries) used: near
	# 100 %, dnsperf, not the server, set the pace.
	load=$(echo "$c0 $c1" | awk '{print 100 * ($3 - $1) / ($4 - $2)}')
	# The server's CPU per query answered, in µs.
	us=$(echo "$busy * 10000 / $qps" | bc -l)
	p99=$(taskset -c 0 dnsperf -s 127.0.0.1 -p "$3" -d "$4" -c 4 -q 200 -l "$LEN" -v 2>/dev/null |
		awk '$1==">" {print $5}' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int(NR*0.99)]*1000000; else print 0}')
	echo "$1 $qps $p99 $lost $busy $load $us" >>"$work/results"
	if [ -n "${trail[${1%-mix}]:-}" ]; then prune "${1%-mix}"; fi
}
# prune NAME: between runs, deletes the sealed segments of NAME's trail (all but the newest, by
# name, which is chain order) and their indexes, counting their records, so a run's trail (about
# a GB) does not fill the disk. The trail's own retention would do it, but the revisions run
# beside this one take no retention flag.
declare -A pruned
prune() {
	local segs=("${trail[$1]}"/*.jsonl) s
	local n=${#segs[@]}
	for s in "${segs[@]:0:n-1}"; do
		pruned[$1]=$((${pruned[$1]:-0} + $(wc -l <"$s")))
		rm -f "$s" "${s%.jsonl}.idx"
	done
}
for round in $(seq 1 "$ROUNDS"); do
	echo "round $round of $ROUNDS" >&2
	for n in "${servers[@]}"; do run "$n" "${pid[$n]}" "${port[$n]}" "$work/allowed.txt"; done
	run coredns "$pid_coredns" 15355 "$work/allowed.txt"
	run unbound "$pid_unbound" 15356 "$work/allowed.txt"
	run dnsmasq "$pid_dnsmasq" 15357 "$work/allowed.txt"
	run reflect "$pid_reflect" 15359 "$work/allowed.txt"
	for n in "${servers[@]}"; do run "$n-mix" "${pid[$n]}" "${port[$n]}" "$work/mix.txt"; done
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v n="$1" -v c="$2" '$1==n {print $c}' "$work/results" | median; }
names=("${servers[@]}" coredns unbound dnsmasq reflect)
for n in "${servers[@]}"; do names+=("$n-mix"); done
label() { if [ "$1" = reflect ]; then echo "bare reflector (no DNS work)"; else echo "$1"; fi; }
report=$(
	printf '| server | names | qps | p99 µs | lost | server CPU %% | server µs/query | load core %% |\n|---|---|---|---|---|---|---|---|\n'
	for name in "${names[@]}"; do
		q="100 allowed, cached"; [ "${name%-mix}" != "$name" ] && q="70% allowed, 20% refused, 10% tunnel-shaped"
		printf '| %s | %s | %.0f | %.0f | %s | %.0f | %.2f | %.0f |\n' "$(label "${name%-mix}")" "$q" "$(col "$name" 2)" "$(col "$name" 3)" "$(col "$name" 4)" "$(col "$name" 5)" "$(col "$name" 7)" "$(col "$name" 6)"
	done
)
ratio() { echo "scale=2; $(col "$1" "$3") / $(col "$2" "$3")" | bc -l; }
summary=$(
	echo
	for peer in coredns unbound dnsmasq; do
		echo "- airlock / $peer: qps $(ratio airlock $peer 2)x, p99 $(ratio airlock $peer 3)x, $peer's server CPU per query / airlock's $(ratio $peer airlock 7)x"
	done
	echo "- airlock / bare reflector: qps $(ratio airlock reflect 2)x; the reflector does no DNS work, so a server whose qps is near it is paced by the load generator, not by its own work"
	for rev in "${befores[@]}"; do
		echo "- airlock / airlock@$rev: qps $(ratio airlock "airlock@$rev" 2)x cached, $(ratio airlock-mix "airlock@$rev-mix" 2)x mixed; server CPU per query $(ratio airlock "airlock@$rev" 7)x"
	done
	echo "- audit records written by airlock: $((${pruned[airlock]:-0} + $(cat "$work"/airlock-audit/*.jsonl | wc -l)))"
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
	echo "not the load, set the pace), server µs/query that CPU per query answered, and load core % the"
	echo "share of core 0 used meanwhile (dnsperf and the kernel's delivery of its queries; near 100: the"
	echo "load generator, not the server, set the pace). The bare reflector (\`dnsbench reflect\`) reads and"
	echo "writes batches of 64 (recvmmsg, sendmmsg, UDP_SEGMENT as airlock) and answers each query with one"
	echo "fixed A record, with no cache, decision or log: what the load reaches against a server doing nothing. Command:"
	echo
	echo "    ${CMD:-make bench-dns}"
	echo
	echo "$report"
	echo "$summary"
} >docs/bench-dns.md
