#!/usr/bin/env bash
# make bench-gateway: airlock's gateway (audit on) against direct, stripe/smokescreen and Squid
# (access log off, and on: the work airlock's audit does) as plain HTTP forward proxies; the
# intercepted path against direct TLS and Squid's ssl-bump (its own CA), kept alive and on a
# new connection per request; bulk transfers through the intercepted path, with and without a
# credential injected and scrubbed; and the gateway's memory with idle connections and tunnels.
# Placement: every proxy alone on core 1; the upstream and the load generators on core 0. Each
# throughput configuration runs ROUNDS times in turn and the median is reported. The tables go
# to stdout and to docs/bench-gateway.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
tools="$cache/tools"
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-6s}
BULK_GET=${BULK_GET:-1073741824}
BULK_PUT=${BULK_PUT:-268435456}
# BEFORE: the commit whose gateway runs beside this tree's as airlock-before (the rows of #34's
# before-and-after, from one run); empty leaves those rows out.
BEFORE=${BEFORE-b4b9ad8}
# ROWS: run only these throughput rows, as KIND:CONNS words (KIND plain, intercepted or new,
# CONNS 1 or 32), each with the rows it is compared with, e.g. ROWS="plain:1 plain:32
# intercepted:32 new:32"; the word bulk runs the bulk rows. The rows not named, the memory rows,
# the go benchmarks and the write to docs/bench-gateway.md are then left out. Empty (the
# default): every row.
ROWS=${ROWS-}
want() { [ -z "$ROWS" ] || [[ " $ROWS " == *" $1:$2 "* ]]; }
mkdir -p "$tools"
# The memory rows hold 10,000 connections open in one process, through one proxy.
ulimit -n "$(ulimit -Hn)"
fds=$(ulimit -n)
[ "$fds" = unlimited ] && fds=65536
[ "$fds" -ge 10100 ] || { echo "the memory rows need 10,100 open files per process; the hard limit here is $fds" >&2; exit 1; }

need=()
command -v wrk >/dev/null || need+=(wrk)
# squid-openssl is Debian's Squid built with TLS interception (it replaces the plain package).
squid -v 2>/dev/null | grep -q -- --with-openssl || need+=(squid-openssl)
command -v openssl >/dev/null || need+=(openssl)
command -v taskset >/dev/null || need+=(util-linux)
command -v bc >/dev/null || need+=(bc)
if [ ${#need[@]} -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -x "$tools/smokescreen" ] || GOBIN="$tools" go install github.com/stripe/smokescreen@v0.1.0
go build -o "$tools/gatewaybench" ./bench/gatewaybench
gb="$tools/gatewaybench"

. scripts/bench-lib.sh
if [ -n "$BEFORE" ]; then
	mkdir -p "$work/before"
	git archive "$BEFORE" | tar -x -C "$work/before"
	(cd "$work/before" && go build -o "$work/gatewaybench-before" ./bench/gatewaybench)
fi

aside upstream "$gb" upstream -http 127.0.0.1:18081 -https 127.0.0.1:18443 -cert "$work"
waitport 18081 upstream
waitport 18443 upstream
bg gateway "$gb" gateway -listen 127.0.0.1:18080 -http-upstream 127.0.0.1:18081 -https-upstream 127.0.0.1:18443 -cert "$work" -audit "$work/audit"
[ -n "$BEFORE" ] && bg gateway_before "$work/gatewaybench-before" gateway -listen 127.0.0.1:18087 -http-upstream 127.0.0.1:18081 -https-upstream 127.0.0.1:18443 -cert "$work" -audit "$work/audit-before"
bg relay "$gb" relay -listen 127.0.0.1:18086 -to 127.0.0.1:18081
bg smokescreen "$tools/smokescreen" --listen-ip 127.0.0.1 --listen-port 18083 --allow-range 127.0.0.0/8

# Squid three ways, each its own process: access log off (18082), on (18084), and intercepting
# TLS with its own CA (18085, log off like the first). Squid mints each host's certificate
# with its helper and keeps it in memory, as airlock's CA keeps its leaves.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=squid bench CA" \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
	-keyout "$work/squid-ca.key" -out "$work/squid-ca.pem" 2>/dev/null
echo "127.0.0.1 upstream.bench" >"$work/hosts"
squidconf() { # name port log extra...
	local name=$1 port=$2 log=$3
	shift 3
	mkdir -p "$work/$name" && chmod 777 "$work/$name"
	{
		echo "http_port 127.0.0.1:$port $*"
		echo "http_access allow all"
		echo "cache deny all"
		echo "access_log $log"
		echo "cache_log $work/$name/cache.log"
		echo "pid_filename $work/$name/squid.pid"
		echo "coredump_dir $work/$name"
		echo "hosts_file $work/hosts"
		echo "max_filedescriptors $fds"
		echo "workers 1"
		echo "shutdown_lifetime 0 seconds"
	} >"$work/$name.conf"
}
squidconf squid 18082 none
squidconf squid_log 18084 "stdio:$work/squid_log/access.log"
/usr/lib/squid/security_file_certgen -c -s "$work/ssl_db" -M 16MB >/dev/null
chmod -R 777 "$work/ssl_db"
squidconf squid_bump 18085 none ssl-bump tls-cert="$work/squid-ca.pem" tls-key="$work/squid-ca.key" \
	generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
{
	echo "sslcrtd_program /usr/lib/squid/security_file_certgen -s $work/ssl_db -M 16MB"
	echo "sslcrtd_children 4 startup=1 idle=1"
	echo "ssl_bump bump all"
	echo "tls_outgoing_options cafile=$work/ca.pem"
} >>"$work/squid_bump.conf"
chmod 644 "$work/squid-ca.key"
for s in squid squid_log squid_bump; do bg "$s" "$(command -v squid)" -N -f "$work/$s.conf"; done
waitport 18080 gateway
waitport 18083 smokescreen
waitport 18086 relay
[ -z "$BEFORE" ] || waitport 18087 gateway_before
waitport 18082 squid
waitport 18084 squid_log
waitport 18085 squid_bump

# wrk through a forward proxy: the absolute-form URL goes in the request path.
lua() { printf 'wrk.path = "%s"\nwrk.headers["Host"] = "%s"\n' "$1" "$2" >"$work/$3.lua"; echo "$work/$3.lua"; }
to_us() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v*1000} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000000} else print v}'; }
# proxypid NAME: the process of the proxy a row measures; none for the direct rows.
proxypid() {
	case $1 in
	relay) echo "$pid_relay" ;;
	airlock-before*) echo "$pid_gateway_before" ;;
	airlock*) echo "$pid_gateway" ;;
	smokescreen) echo "$pid_smokescreen" ;;
	squid) echo "$pid_squid" ;;
	squid-log) echo "$pid_squid_log" ;;
	squid-bump*) echo "$pid_squid_bump" ;;
	esac
}
# cpuper NAME TICKS RPS: the proxy's own CPU time per request in µs over a run of DUR, from the
# clock ticks it used; "-" for the direct rows. Unlike req/s it does not move with what else ran
# on the proxy's core meanwhile (other processes, the hypervisor's steal).
cpuper() {
	[ -n "$(proxypid "$1")" ] || { echo -; return; }
	echo "$2 * 1000000 / $(getconf CLK_TCK) / ($3 * ${DUR%s})" | bc -l
}
runwrk() { # name conns addr script
	local out pid t0 t1
	pid=$(proxypid "$1")
	t0=$([ -n "$pid" ] && cpu "$pid" || echo 0)
	if [ -n "$4" ]; then
		out=$(taskset -c 0 wrk -t1 -c"$2" -d"$DUR" --latency -s "$4" "http://$3" 2>&1)
	else
		out=$(taskset -c 0 wrk -t1 -c"$2" -d"$DUR" --latency "http://$3/" 2>&1)
	fi
	t1=$([ -n "$pid" ] && cpu "$pid" || echo 0)
	local rps p50 p99
	rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
	p50=$(echo "$out" | awk '$1=="50%" {print $2}' | to_us)
	p99=$(echo "$out" | awk '$1=="99%" {print $2}' | to_us)
	if echo "$out" | grep -q "Non-2xx\|Socket errors"; then echo "wrk $1: errors" >&2; echo "$out" >&2; exit 1; fi
	echo "$1 $2 $rps $p50 $p99 $(cpuper "$1" $((t1 - t0)) "$rps")" >>"$work/results"
}
runload() { # name conns proxy(or "") extra...
	local name=$1 c=$2 proxy=$3 out pid t0 t1 fields
	shift 3
	pid=$(proxypid "$name")
	t0=$([ -n "$pid" ] && cpu "$pid" || echo 0)
	out=$(taskset -c 0 "$gb" load -url "https://upstream.bench:18443/" ${proxy:+-proxy "$proxy"} -cert "$work" -c "$c" -d "$DUR" "$@")
	t1=$([ -n "$pid" ] && cpu "$pid" || echo 0)
	fields=$(echo "$out" | sed -E 's/.*rps=([0-9.]+) p50_us=([0-9]+) p99_us=([0-9]+).*/\1 \2 \3/')
	echo "$name $c $fields $(cpuper "$name" $((t1 - t0)) "${fields%% *}")" >>"$work/results"
}
# cpu PID: the process's user and system time so far, in clock ticks.
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
runbulk() { # name host proxy(or "") -get|-put bytes
	local before after out pid=$pid_gateway
	[[ $1 != *-before ]] || pid=$pid_gateway_before
	before=$(cpu "$pid")
	out=$(taskset -c 0 "$gb" bulk -url "https://$2:18443/bulk" ${3:+-proxy "$3"} -cert "$work" "$4" "$5")
	after=$(cpu "$pid")
	# CPU seconds per GB (10^9 bytes) of the gateway's own core; the direct rows have none.
	local cpugb=0
	[ -n "$3" ] && cpugb=$(echo "scale=3; ($after - $before) / $(getconf CLK_TCK) / ($5 / 1000000000)" | bc -l)
	echo "$1 ${4#-} $(echo "$out" | sed -E 's/.*mbps=([0-9.]+).*/\1/') $cpugb" >>"$work/bulk"
}

ours=$(lua "http://upstream.bench:18081/" "upstream.bench:18081" ours)
peer=$(lua "http://127.0.0.1:18081/" "127.0.0.1:18081" peer)
gw=http://127.0.0.1:18080
gwb=http://127.0.0.1:18087
# steal: the clock ticks the hypervisor gave core 1 to someone else, so far.
steal() { awk '$1=="cpu1" {print $9}' /proc/stat; }
steal0=$(steal)
: >"$work/results" # rows ROWS leaves out find it empty
bump="-roots $work/squid-ca.pem"
for round in $(seq 1 "$ROUNDS"); do
	echo "round $round of $ROUNDS" >&2
	for c in 1 32; do
		if want plain "$c"; then
			runwrk direct "$c" 127.0.0.1:18081 ""
			runwrk relay "$c" 127.0.0.1:18086 ""
			runwrk airlock "$c" 127.0.0.1:18080 "$ours"
			[ -z "$BEFORE" ] || runwrk airlock-before "$c" 127.0.0.1:18087 "$ours"
			runwrk smokescreen "$c" 127.0.0.1:18083 "$peer"
			runwrk squid "$c" 127.0.0.1:18082 "$peer"
			runwrk squid-log "$c" 127.0.0.1:18084 "$peer"
		fi
		if want intercepted "$c"; then
			runload direct-tls "$c" ""
			runload airlock-intercepted "$c" "$gw"
			[ -z "$BEFORE" ] || runload airlock-before-intercepted "$c" "$gwb"
			runload squid-bump "$c" http://127.0.0.1:18085 $bump
		fi
		if want new "$c"; then
			runload direct-tls-new "$c" "" -new
			runload airlock-new "$c" "$gw" -new
			[ -z "$BEFORE" ] || runload airlock-before-new "$c" "$gwb" -new
			runload squid-bump-new "$c" http://127.0.0.1:18085 $bump -new
		fi
	done
	[ -z "$ROWS" ] || [[ " $ROWS " == *" bulk "* ]] || continue
	for dir in "-get $BULK_GET" "-put $BULK_PUT"; do
		# shellcheck disable=SC2086
		runbulk direct upstream.bench "" $dir
		# shellcheck disable=SC2086
		runbulk intercepted upstream.bench "$gw" $dir
		# shellcheck disable=SC2086
		[ -z "$BEFORE" ] || runbulk intercepted-before upstream.bench "$gwb" $dir
		# shellcheck disable=SC2086
		runbulk injected secret.bench "$gw" $dir
		# shellcheck disable=SC2086
		[ -z "$BEFORE" ] || runbulk injected-before secret.bench "$gwb" $dir
	done
done
steal1=$(steal)
if grep -q "^squid-log " "$work/results" || [ -z "$ROWS" ]; then
	[ -s "$work/squid_log/access.log" ] ||
		{ echo "Squid's access log stayed empty: the logged rows would not be logging" >&2; exit 1; }
fi

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v n="$1" -v c="$2" -v k="$3" '$1==n && $2==c {print $k}' "$work/${4:-results}" | median; }
ratio() { echo "scale=2; $(col "$1" "$3" 3) / $(col "$2" "$3" 3)" | bc -l | sed 's/^\./0./'; }
table() { # base name...
	local base=$1
	shift
	printf '| path | conns | req/s | p50 µs | p99 µs | added p50 µs | added p99 µs | proxy CPU µs per request |\n|---|---|---|---|---|---|---|---|\n'
	for c in 1 32; do
		[ -n "$(col "$base" "$c" 3)" ] || continue # a row ROWS left out
		for name in "$base" "$@"; do
			local per
			per=$(col "$name" "$c" 6)
			[ "$per" = - ] || per=$(printf '%.1f' "$per")
			printf '| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s |\n' "$name" "$c" "$(col "$name" "$c" 3)" \
				"$(col "$name" "$c" 4)" "$(col "$name" "$c" 5)" \
				"$(echo "$(col "$name" "$c" 4) - $(col "$base" "$c" 4)" | bc -l)" \
				"$(echo "$(col "$name" "$c" 5) - $(col "$base" "$c" 5)" | bc -l)" "$per"
		done
	done
}
b() { [ -n "$BEFORE" ] && echo "$1"; }
plain=$(table direct relay airlock $(b airlock-before) smokescreen squid squid-log)
tls=$(table direct-tls airlock-intercepted $(b airlock-before-intercepted) squid-bump)
fresh=$(table direct-tls-new airlock-new $(b airlock-before-new) squid-bump-new)
bulk=$(
	printf '| transfer | path | MB/s | of direct | gateway CPU s per GB |\n|---|---|---|---|---|\n'
	for dir in get put; do
		[ -s "$work/bulk" ] || continue # left out by ROWS
		d=$(col direct "$dir" 3 bulk)
		for name in direct intercepted $(b intercepted-before) injected $(b injected-before); do
			v=$(col "$name" "$dir" 3 bulk)
			printf '| %s | %s | %.0f | %.0f %% | %s |\n' "$([ $dir = get ] && echo "download $((BULK_GET >> 20)) MiB" || echo "upload $((BULK_PUT >> 20)) MiB")" \
				"$name" "$v" "$(echo "100 * $v / $d" | bc -l)" "$(col "$name" "$dir" 4 bulk | sed 's/^\./0./')"
		done
	done
)
if [ -n "$ROWS" ]; then
	for t in "$plain" "$tls" "$fresh" "$bulk"; do [ "$(echo "$t" | wc -l)" -le 2 ] || { echo "$t"; echo; }; done
	for w in $ROWS; do
		c=${w#*:}
		case ${w%:*} in
		plain) set -- airlock airlock-before squid-log ;;
		intercepted) set -- airlock-intercepted airlock-before-intercepted squid-bump ;;
		new) set -- airlock-new airlock-before-new squid-bump-new ;;
		*) continue ;;
		esac
		echo "- $1 / $3 at $c connection(s): req/s $(ratio "$1" "$3" "$c"), CPU per request $(echo "scale=2; $(col "$3" "$c" 6) / $(col "$1" "$c" 6)" | bc -l)$([ -z "$BEFORE" ] ||
			echo "; $2 / $3: req/s $(ratio "$2" "$3" "$c"), CPU per request $(echo "scale=2; $(col "$3" "$c" 6) / $(col "$2" "$c" 6)" | bc -l)")"
	done
	[[ " $ROWS " == *" plain:1 "* ]] &&
		echo "- own added p50 at 1 connection above the bare relay: airlock $(echo "$(col airlock 1 4) - $(col relay 1 4)" | bc -l) µs$([ -z "$BEFORE" ] || echo ", airlock-before $(echo "$(col airlock-before 1 4) - $(col relay 1 4)" | bc -l) µs")"
	echo "- core 1 was stolen by the hypervisor for $(echo "($steal1 - $steal0) / $(getconf CLK_TCK)" | bc -l | sed 's/^\./0./; s/\(\.[0-9][0-9]\).*/\1/') s; ROWS=\"$ROWS\": the rows not named, memory and the go benchmarks left out, docs/bench-gateway.md not written"
	exit 0
fi
target() { # what got want
	local ok=no
	[ "$(echo "$2 >= $3" | bc -l)" = 1 ] && ok=yes
	echo "- $1: $2 (target $3: $ok)"
}
# cpuratio A B CONNS: B's CPU per request over A's (how many times A's work B's is).
cpuratio() { echo "scale=2; $(col "$2" "$3" 6) / $(col "$1" "$3" 6)" | bc -l | sed 's/^\./0./'; }
# own NAME: what NAME adds at one connection above the bare relay's p50, in µs.
own() { echo "$(col "$1" 1 4) - $(col relay 1 4)" | bc -l | sed 's/\..*//'; }
added1=$(echo "$(col airlock 1 4) - $(col direct 1 4)" | bc -l)
floor1=$(echo "$(col relay 1 4) - $(col direct 1 4)" | bc -l)
atmost() { # what got want
	echo "- $1: $2 µs (target at most $3: $([ "$(echo "$2 <= $3" | bc -l)" = 1 ] && echo yes || echo no))"
}
summary=$(
	target "airlock / Squid with its access log on, req/s at 32 connections" "$(ratio airlock squid-log 32)" 1.5
	[ -z "$BEFORE" ] || echo "- airlock-before ($BEFORE) / Squid with its access log on, req/s at 32 connections: $(ratio airlock-before squid-log 32)"
	echo "- Squid with its access log on / airlock, CPU per request at 32 connections (the ratio that does not move with the machine's load): $(cpuratio airlock squid-log 32)$([ -z "$BEFORE" ] || echo "; for airlock-before $(cpuratio airlock-before squid-log 32)")"
	target "airlock / Squid with its access log off, req/s at 32 connections" "$(ratio airlock squid 32)" 1.2
	echo "- airlock / smokescreen, req/s at 32 connections: $(ratio airlock smokescreen 32)"
	atmost "airlock's own added p50 at 1 connection, above the bare relay's (the relay adds ${floor1%.*} µs over direct, airlock ${added1%.*} µs)" "$(own airlock)" 50
	[ -z "$BEFORE" ] || echo "- airlock-before's own added p50 at 1 connection, above the bare relay's: $(own airlock-before) µs"
	target "intercepted / Squid ssl-bump, kept-alive req/s at 1 connection" "$(ratio airlock-intercepted squid-bump 1)" 1.0
	target "intercepted / Squid ssl-bump, kept-alive req/s at 32 connections" "$(ratio airlock-intercepted squid-bump 32)" 1.5
	target "intercepted / Squid ssl-bump, new connections/s at 1 connection" "$(ratio airlock-new squid-bump-new 1)" 1.0
	target "intercepted / Squid ssl-bump, new connections/s at 32 connections" "$(ratio airlock-new squid-bump-new 32)" 1.5
	echo "- Squid ssl-bump / intercepted, CPU per request at 32 connections: kept-alive $(cpuratio airlock-intercepted squid-bump 32), new $(cpuratio airlock-new squid-bump-new 32)"
	if [ -n "$BEFORE" ]; then
		for c in 1 32; do
			echo "- airlock-before ($BEFORE) / Squid ssl-bump at $c connection(s): kept-alive $(ratio airlock-before-intercepted squid-bump "$c"), new $(ratio airlock-before-new squid-bump-new "$c")"
		done
	fi
	echo "- core 1 (the proxies') was stolen by the hypervisor for $(echo "($steal1 - $steal0) / $(getconf CLK_TCK)" | bc -l | sed 's/^\./0./; s/\(\.[0-9][0-9]\).*/\1/') s of the throughput rounds; the clock source was $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
)
echo "$plain"; echo; echo "$tls"; echo; echo "$fresh"; echo; echo "$summary"
echo "$bulk"

# Memory: the proxy's resident set before and while idle connections are held open, each row on
# a proxy started afresh (a Go heap keeps what an earlier row freed, which would hide growth).
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
fresh() { # name: restart that proxy on its port; its pid is then in pid_NAME
	case $1 in
	gateway)
		kill "$pid_gateway"; wait "$pid_gateway" 2>/dev/null || true
		bg gateway "$gb" gateway -listen 127.0.0.1:18080 -http-upstream 127.0.0.1:18081 -https-upstream 127.0.0.1:18443 -cert "$work" -audit "$work/audit-mem-$RANDOM"
		waitport 18080 gateway ;;
	squid)
		kill "$pid_squid"; wait "$pid_squid" 2>/dev/null || true
		# Wait for the old one to let its port go, so the port answers only for the new one.
		for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/18082) 2>/dev/null || break; sleep 0.1; done
		bg squid "$(command -v squid)" -N -f "$work/squid.conf"
		waitport 18082 squid ;;
	esac
}
holdidle() { # proxy-pid proxy-addr n mode: sets before and grow, the proxy's RSS and its growth in KiB
	local after hp
	sleep 1
	before=$(rss "$1")
	taskset -c 0 "$gb" idle -proxy "$2" -n "$3" -mode "$4" >"$work/idle.out" 2>&1 &
	hp=$!
	for _ in $(seq 1 600); do grep -q ready "$work/idle.out" && break; kill -0 "$hp" 2>/dev/null || break; sleep 0.1; done
	grep -q ready "$work/idle.out" || { echo "the idle holder did not open $3 $4 connections within 60 s:" >&2; cat "$work/idle.out" >&2; exit 1; }
	sleep 1
	after=$(rss "$1")
	kill "$hp"; wait "$hp" 2>/dev/null || true
	grow=$((after - before))
}
printf '| proxy | held open | RSS before MiB | growth MiB | per connection KiB |\n|---|---|---|---|---|\n' >"$work/memory"
for spec in "gateway 127.0.0.1:18080 1000 keepalive" "gateway 127.0.0.1:18080 10000 keepalive" \
	"gateway 127.0.0.1:18080 1000 tunnel" "squid 127.0.0.1:18082 1000 keepalive" "squid 127.0.0.1:18082 10000 keepalive"; do
	read -r name addr n mode <<<"$spec"
	fresh "$name"
	holdidle "$(eval echo "\$pid_$name")" "$addr" "$n" "$mode"
	printf '| %s | %s %s | %.1f | %.1f | %.1f |\n' "$([ "$name" = gateway ] && echo airlock || echo squid)" "$n" \
		"$([ "$mode" = tunnel ] && echo "tunnels" || echo "idle kept-alive")" "$(echo "$before / 1024" | bc -l)" \
		"$(echo "$grow / 1024" | bc -l)" "$(echo "$grow / $n" | bc -l)" >>"$work/memory"
done
memory=$(cat "$work/memory")
echo "$memory"

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
	echo "Each proxy runs alone on core 1; the upstream, wrk and the Go load generator share core 0, so"
	echo "a proxy is charged only for its own work. airlock runs with its audit trail on (hash-chained"
	echo "JSON lines to a file); smokescreen v0.1.0 logs its JSON decision lines; Squid $(squid -v | awk 'NR==1 {print $4}') (Debian's"
	echo "squid-openssl) runs with caching off, three ways: access log off (\`squid\`), access log on"
	echo "(\`squid-log\`, one line per request to a file: the work airlock's audit does), and intercepting"
	echo "TLS with ssl-bump and its own P-256 CA (\`squid-bump\`, log off)."
	[ -z "$BEFORE" ] || echo "\`airlock-before\` is the gateway built from $BEFORE (before #34's work on it), run the same way beside it."
	echo
	echo "Server side: airlock serves HTTP/1.x (the sandbox listener, and intercepted sessions that do not"
	echo "negotiate h2) with its own per-connection loop on net/http's parsers and writers"
	echo "(gateway/h1serve.go: http.ReadRequest, net/http's body reader, Header.WriteSubset), not"
	echo "http.Server, whose background read per request (a goroutine watching for the client's close)"
	echo "it starts only for a request still in its handler after 5 ms; HTTP/2 stays on http.Server."
	echo "\`ROWS=\"plain:1 plain:32 intercepted:32 new:32\"\` runs only those rows (and what they are compared"
	echo "with), without writing this file."
	echo
	echo "Plain HTTP, kept-alive connections, wrk (absolute-form requests). \`relay\` is a bare TCP relay"
	echo "on core 1 (bench/gatewaybench relay: two io.Copy loops, no HTTP): the floor of what any proxy"
	echo "placed on its own core adds, the request's two extra hops between cores. The last column of"
	echo "each table is the proxy's own CPU time (user and system, from /proc) per request: req/s moves"
	echo "with whatever else runs on the proxy's core and with the hypervisor's steal, CPU per request"
	echo "much less (docs/design-notes.md, on why the ratio moved between runs and machines):"
	echo
	echo "$plain"
	echo
	echo "Intercepted HTTPS, kept alive (bench/gatewaybench load: one CONNECT per connection, then"
	echo "requests over the intercepted TLS):"
	echo
	echo "$tls"
	echo
	echo "Intercepted HTTPS, a new connection per request (one CONNECT, the client's TLS handshake with"
	echo "the proxy, one request; req/s is new connections a second; the load generator does not build"
	echo "certificate chains, which on the shared core would cap it first). airlock keeps its upstream"
	echo "connections alive across client connections; Squid's bumped server connections are pinned to"
	echo "their client connection, so Squid also shakes hands with the upstream each time:"
	echo
	echo "$fresh"
	echo
	echo "$summary"
	echo
	echo "Bulk transfers on one connection (bench/gatewaybench bulk), MB/s = 10^6 bytes a second:"
	echo "\`intercepted\` is the intercepted path with no credential, \`injected\` adds a credential"
	echo "injected into the request and every byte of the answer scanned for it$([ -z "$BEFORE" ] || echo "; the \`-before\` rows are airlock-before's"):"
	echo
	echo "$bulk"
	echo
	echo "Memory (resident set, /proc): idle kept-alive connections have each made one plain HTTP"
	echo "request; tunnels are CONNECTs to a tunnel scope answered 200, then idle (each holds the"
	echo "client's connection and the upstream's):"
	echo
	echo "$memory"
	echo
	echo "Allocations per request, from \`go test -bench -benchmem ./gateway/\` on one core:"
	echo
	echo "$allocs"
	echo
	echo "Where the gateway's time goes: docs/design-notes.md."
} >docs/bench-gateway.md
