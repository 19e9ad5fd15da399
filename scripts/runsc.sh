#!/usr/bin/env bash
# Builds gVisor's runsc from the pinned modules in tools/runsc (no package or download site is
# reachable) and registers it with the Docker engine as the runtime "runsc", in daemon.json,
# keeping what else the file says. An engine already running reloads the file on SIGHUP and is
# never restarted; one that is not running is started by engine.sh and reads it. The binary is
# cached outside the checkout, keyed by the module's go.mod and go.sum (about two minutes to
# build on 2 cores); a second run changes nothing. RUNSC_PLATFORMS are gVisor's platforms to
# register, each as its own engine runtime: systrap as "runsc", the others as "runsc-<platform>"
# (a template's platform field picks one). The default is "systrap ptrace"; add kvm where the
# CPU offers it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/runtime-lib.sh
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
platforms=${RUNSC_PLATFORMS:-systrap ptrace}
daemon_json=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
pidfile=${DOCKER_PIDFILE:-/var/run/docker.pid}
docker=${DOCKER:-docker} # DOCKER, DOCKERD and RUNSC_LINK point the tests at stand-ins
link=${RUNSC_LINK:-bin/runsc}
names=()
for platform in $platforms; do
	case $platform in
	systrap) names+=(runsc) ;;
	ptrace | kvm) names+=("runsc-$platform") ;;
	*) echo "runsc: RUNSC_PLATFORMS names $platform, which is not systrap, ptrace or kvm" >&2; exit 1 ;;
	esac
done
key=$(cat tools/runsc/go.mod tools/runsc/go.sum | sha256sum | cut -c1-16)
out="$cache/runsc-$key/runsc"
if [ ! -x "$out" ]; then
	echo "runsc: building gVisor's runsc from tools/runsc (first time only; about two minutes)"
	mkdir -p "$cache/runsc-$key"
	(cd tools/runsc && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$out.tmp" gvisor.dev/gvisor/runsc)
	mv "$out.tmp" "$out"
fi
mkdir -p "$(dirname "$link")"
ln -sfn "$out" "$link"
# The registration tool, built once beside it (go run would not pass its exit status on).
# The engine runs runsc through airlock's wrapper beside it (tools/runsc/wrap), which boots a
# sandbox the node wired before its start in the namespace the node made for it; rebuilt when its
# source changes, under the same path, so the engine's configuration does not change with it.
wrap="$cache/runsc-$key/airlock-runsc"
wkey=$(sha256sum <tools/runsc/wrap/main.go | cut -c1-16)
if [ ! -x "$wrap" ] || [ "$(cat "$wrap.key" 2>/dev/null)" != "$wkey" ]; then
	(cd tools/runsc && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$wrap.tmp" ./wrap)
	mv "$wrap.tmp" "$wrap"
	echo "$wkey" >"$wrap.key"
fi
reg="$cache/runsc-$key/register"
[ -x "$reg" ] || (cd tools/runsc && go build -o "$reg" ./register)

changed=0
i=0
for platform in $platforms; do
	name=${names[$i]}
	i=$((i + 1))
	set +e
	"$reg" -file "$daemon_json" -name "$name" -path "$wrap" -arg "--platform=$platform"
	rc=$?
	set -e
	case $rc in
	0) echo "runsc: registered $name (platform $platform) in $daemon_json"; changed=1 ;;
	3) ;;
	*) exit 1 ;;
	esac
done
engine_lists runsc "$changed" "${names[@]}"
