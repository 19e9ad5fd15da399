#!/usr/bin/env bash
# Registers crun (Debian's package, which deps.sh installs) with the Docker engine as the runtime
# "crun", in daemon.json, keeping what else the file says, as runsc.sh registers runsc: an engine
# already running reloads the file on SIGHUP and is never restarted, only when the file changed;
# one that is not running is started by engine.sh and reads it. A template with `runtime: crun`
# runs under it: the same OCI spec as runc, from the same engine (namespaces, seccomp, dropped
# capabilities, no new privileges), started by one C program where runc re-executes itself.
#
# The host's cgroup layout first. On a hybrid host (cgroup v1 controllers under CGROUP_ROOT, the
# v2 hierarchy at CGROUP_ROOT/unified) crun refuses every container while the v2 hierarchy holds
# a controller ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2"; runc
# does not look). A host whose init mounts every controller under v1 leaves v2 none; these
# machines mount no v1 hierarchy for hugetlb, so it sits on v2, enabled for no cgroup there. Each
# such controller is bound to a v1 hierarchy of its own (CGROUP_ROOT/<name>), as a systemd host in
# hybrid mode mounts it: nothing else changes for the engine or runc, which then make that
# controller's v1 cgroup for each container as they do the others'. A controller a v2 cgroup
# enables (the v2 root's cgroup.subtree_control names it) is in use and is not moved: this fails,
# naming it. The binding lasts until the host restarts; every `make` runs this again (deps.sh).
# CRUN, CGROUP_ROOT, MOUNT, DOCKER, DOCKER_DAEMON_JSON and DOCKER_PIDFILE point the tests at
# stand-ins.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/runtime-lib.sh
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
daemon_json=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
pidfile=${DOCKER_PIDFILE:-/var/run/docker.pid}
docker=${DOCKER:-docker}
cgroot=${CGROUP_ROOT:-/sys/fs/cgroup}
mount=${MOUNT:-mount}
crun=${CRUN:-$(command -v crun || true)}
[ -n "$crun" ] && [ -x "$crun" ] || { echo "crun: no crun binary (scripts/deps.sh installs Debian's crun package)" >&2; exit 1; }

# v2_controllers: the controllers the v2 hierarchy of a hybrid host holds, one a line (none on a
# v1-only or v2-only host).
v2_controllers() {
	[ -f "$cgroot/unified/cgroup.controllers" ] || return 0
	tr ' ' '\n' <"$cgroot/unified/cgroup.controllers" | sed '/^$/d'
}
for c in $(v2_controllers); do
	if tr ' ' '\n' <"$cgroot/unified/cgroup.subtree_control" | grep -qx "$c"; then
		echo "crun: the cgroup v2 hierarchy ($cgroot/unified) enables the $c controller for its cgroups, and crun refuses a hybrid host whose v2 hierarchy holds any; disable it there (or boot the host in cgroup v2 alone) and run this again" >&2
		exit 1
	fi
done
for c in $(v2_controllers); do
	echo "crun: binding the $c cgroup controller, unused on cgroup v2 here, to a v1 hierarchy at $cgroot/$c (crun refuses a hybrid host whose v2 hierarchy holds a controller)"
	mkdir -p "$cgroot/$c"
	"$mount" -t cgroup -o "$c" cgroup "$cgroot/$c"
done
if [ -n "$(v2_controllers)" ]; then
	echo "crun: the cgroup v2 hierarchy still holds $(v2_controllers | tr '\n' ' ')after binding them to v1" >&2
	exit 1
fi

# The registration tool, built once, keyed by its source.
key=$(cat tools/runsc/go.mod tools/runsc/register/main.go | sha256sum | cut -c1-16)
reg="$cache/register-$key/register"
if [ ! -x "$reg" ]; then
	mkdir -p "$(dirname "$reg")"
	(cd tools/runsc && go build -o "$reg.tmp" ./register) && mv "$reg.tmp" "$reg"
fi
set +e
"$reg" -file "$daemon_json" -name crun -path "$crun"
rc=$?
set -e
case $rc in
0) echo "crun: registered crun ($crun) in $daemon_json"; changed=1 ;;
3) changed=0 ;;
*) exit 1 ;;
esac
engine_lists crun "$changed" crun
