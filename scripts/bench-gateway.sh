#!/usr/bin/env bash
# make bench-gateway: airlock's gateway (audit on) against direct, stripe/smokescreen and Squid as
# plain HTTP forward proxies on kept-alive connections, at 1 and 32 connections, plus intercepted
# HTTPS against direct TLS. Proxies and the upstream run on core 1, the load generators on core 0;
# each configuration runs ROUNDS times in turn and the median is reported. The table goes to
# stdout and to docs/bench-gateway.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
tools="$cache/tools"
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-6s}
mkdir -p "$tools"

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v squid >/dev/null || need+=(squid)
command -v taskset >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -x "$tools/smokescreen" ] || GOBIN="$tools" go install github.com/stripe/smokescreen@v0.1.0
go build -o "$tools/gatewaybench" ./bench/gatewaybench

. scripts/bench-lib.sh
waitport() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened"; exit 1; }

bg upstream "$tools/gatewaybench" upstream -http 127.0.0.1:18081 -https 127.0.0.1:18443 -cert "$work"
waitport 18081; waitport 18443
bg gateway "$tools/gatewaybench" gateway -listen 127.0.0.1:18080 -http-upstream 127.0.0.1:18081 -https-upstream 127.0.0.1:18443 -cert "$work" -audit "$work/audit"
bg smokescreen "$tools/smokescreen" --listen-ip 127.0.0.1 --listen-port 18083 --allow-range 127.0.0.0/8
mkdir -p "$work/squid" && chmod 777 "$work/squid"
cat >"$work/squid.conf" <<CONF
http_port 127.0.0.1:18082
http_access allow all
cache deny all
access_log none
cache_log $work/squid/cache.log
pid_filename $work/squid/squid.pid
coredump_dir $work/squid
workers 1
shutdown_lifetime 0 seconds
CONF
bg squid "$(command -v squid)" -N -f "$work/squid.conf"
waitport 18080; waitport 18082; waitport 18083

# wrk through a forward proxy: the absolute-form URL goes in the request path.
lua() { printf 'wrk.path = "%s"\nwrk.headers["Host"] = "%s"\n' "$1" "$2" >"$work/$3.lua"; echo "$work/$3.lua"; }
to_us() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v*1000} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000000} else print v}'; }
runwrk() { # name conns addr script
	local out
	if [ -n "$4" ]; then
		out=$(taskset -c 0 wrk -t1 -c"$2" -d"$DUR" --latency -s "$4" "http://$3" 2>&1)
	else
		out=$(taskset -c 0 wrk -t1 -c"$2" -d"$DUR" --latency "http://$3/" 2>&1)
	fi
	local rps p50 p99
	rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
	p50=$(echo "$out" | awk '$1=="50%" {print $2}' | to_us)
	p99=$(echo "$out" | awk '$1=="99%" {print $2}' | to_us)
	if echo "$out" | grep -q "Non-2xx"; then echo "wrk $1: non-2xx responses"; echo "$out"; exit 1; fi
	echo "$1 $2 $rps $p50 $p99" >>"$work/results"
}
runload() { # name conns [proxy]
	local out
	out=$(taskset -c 0 "$tools/gatewaybench" load -url "https://upstream.bench:18443/" ${3:+-proxy "$3"} -cert "$work" -c "$2" -d "$DUR")
	echo "$1 $2 $(echo "$out" | sed -E 's/.*rps=([0-9.]+) p50_us=([0-9]+) p99_us=([0-9]+).*/\1 \2 \3/')" >>"$work/results"
}

ours=$(lua "http://upstream.bench:18081/" "upstream.bench:18081" ours)
peer=$(lua "http://127.0.0.1:18081/" "127.0.0.1:18081" peer)
for round in $(seq 1 "$ROUNDS"); do
	echo "round $round of $ROUNDS" >&2
	for c in 1 32; do
		runwrk direct "$c" 127.0.0.1:18081 ""
		runwrk airlock "$c" 127.0.0.1:18080 "$ours"
		runwrk smokescreen "$c" 127.0.0.1:18083 "$peer"
		runwrk squid "$c" 127.0.0.1:18082 "$peer"
		runload direct-tls "$c"
		runload airlock-intercepted "$c" http://127.0.0.1:18080
	done
done

# Medians per (name, conns), then added latency against the direct baseline of the same kind.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
report=$(
	printf '| path | conns | req/s | p50 µs | p99 µs | added p50 µs | added p99 µs |\n|---|---|---|---|---|---|---|\n'
	for c in 1 32; do
		for name in direct airlock smokescreen squid direct-tls airlock-intercepted; do
			rows=$(awk -v n="$name" -v c="$c" '$1==n && $2==c' "$work/results")
			rps=$(echo "$rows" | awk '{print $3}' | median)
			p50=$(echo "$rows" | awk '{print $4}' | median)
			p99=$(echo "$rows" | awk '{print $5}' | median)
			base=direct; case $name in direct-tls|airlock-intercepted) base=direct-tls ;; esac
			brows=$(awk -v n="$base" -v c="$c" '$1==n && $2==c' "$work/results")
			b50=$(echo "$brows" | awk '{print $4}' | median)
			b99=$(echo "$brows" | awk '{print $5}' | median)
			printf '| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f |\n' "$name" "$c" "$rps" "$p50" "$p99" \
				"$(echo "$p50 - $b50" | bc -l)" "$(echo "$p99 - $b99" | bc -l)"
		done
	done
)
echo "$report"
ratio() {
	local a b
	a=$(awk -v n="$1" -v c="$3" '$1==n && $2==c {print $3}' "$work/results" | median)
	b=$(awk -v n="$2" -v c="$3" '$1==n && $2==c {print $3}' "$work/results" | median)
	echo "scale=2; $a / $b" | bc -l
}
summary=$(
	echo
	echo "- airlock / squid req/s at 32 connections: $(ratio airlock squid 32)x"
	echo "- airlock / smokescreen req/s at 32 connections: $(ratio airlock smokescreen 32)x"
	echo "- intercepted HTTPS / direct TLS req/s at 32 connections: $(ratio airlock-intercepted direct-tls 32)x"
)
echo "$summary"
# Allocations per request: the in-process go benchmarks (client, gateway and upstream in one
# process, so the direct row is the client's and upstream's share).
allocs=$(
	printf '| go benchmark | ns/op | B/op | allocs/op |\n|---|---|---|---|\n'
	taskset -c 1 go test -run XXX -bench 'PlainHTTP|InterceptedHTTPS|DirectHTTP' -benchmem -benchtime 2s ./gateway/ |
		awk '/^Benchmark/ {sub(/-[0-9]+$/, "", $1); printf "| %s | %s | %s | %s |\n", $1, $3, $5, $7}'
)
echo "$allocs"
{
	echo "# Gateway benchmark"
	echo
	echo "\`make bench-gateway\` on $(nproc) cores, $(date -u +%Y-%m-%d); median of $ROUNDS rounds of $DUR each."
	echo "Proxies and upstream pinned to core 1, wrk and the Go load generator to core 0. airlock runs"
	echo "with its audit trail on (hash-chained JSON lines to a file); smokescreen v0.1.0 logs its JSON"
	echo "decision lines; Squid 5.7 with access_log none and caching off. Plain HTTP rows use wrk"
	echo "(absolute-form requests on kept-alive connections); the TLS rows use bench/gatewaybench's"
	echo "load generator (one CONNECT per connection, then kept-alive requests over the intercepted TLS)."
	echo
	echo "$report"
	echo "$summary"
	echo
	echo "Allocations per request, from \`go test -bench -benchmem ./gateway/\` on one core:"
	echo
	echo "$allocs"
	echo
	echo "Where the gateway's time goes, and why the 2x-Squid and 70%-of-direct-TLS targets are out of"
	echo "reach with the upstream on the proxy's core: docs/design-notes.md."
} >docs/bench-gateway.md
