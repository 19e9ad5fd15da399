#!/usr/bin/env bash
# Installs and starts what airlock and its tests need on a Debian machine, idempotently: the Docker
# engine (Debian's docker.io, dockerd started when no engine answers), redis-server, debootstrap
# and iptables. Runs as root; on a machine that already has everything it returns in a moment.
set -euo pipefail

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v redis-server >/dev/null || need+=(redis-server)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v iptables >/dev/null || need+=(iptables)
command -v curl >/dev/null || need+=(curl)
command -v git >/dev/null || need+=(git)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)  # dynamic database credential tests
if [ ${#need[@]} -gt 0 ]; then
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
	echo "deps: starting dockerd"
	mkdir -p /var/log
	nohup dockerd >/var/log/airlock-dockerd.log 2>&1 &
	for _ in $(seq 1 60); do
		docker info >/dev/null 2>&1 && break
		sleep 0.5
	done
	docker info >/dev/null 2>&1 || { echo "deps: dockerd did not start:"; tail -20 /var/log/airlock-dockerd.log; exit 1; }
fi
