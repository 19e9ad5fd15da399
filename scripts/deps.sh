#!/usr/bin/env bash
# Installs and starts what airlock and its tests need on a Debian machine, idempotently: the Docker
# engine (Debian's docker.io; engine.sh starts dockerd, in a session of its own, when none
# answers), redis-server, debootstrap and iptables; Node.js and npm (the e2e MCP client runs on
# the official TypeScript SDK), python3 with pytest (the Python client's tests), rsyslog (with
# TLS) as the syslog sink's receiver, prometheus for promtool and chromium (headless: the review
# page's browser test); Debian's CNI plugins, containerd and openssl for the test Kubernetes cluster
# (scripts/kube.sh); crun, the other OCI runtime a template may name (`runtime: crun`), which
# crun.sh registers with the engine once it runs. Runs as root;
# on a machine that already has everything it returns in a moment.
set -euo pipefail

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v redis-server >/dev/null || need+=(redis-server)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v iptables >/dev/null || need+=(iptables)
command -v curl >/dev/null || need+=(curl)
command -v git >/dev/null || need+=(git)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need+=(python3 python3-pytest)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)  # dynamic database credential tests
command -v rsyslogd >/dev/null || need+=(rsyslog)                           # the syslog sink's e2e receiver
ls /usr/lib/*/rsyslog/lmnsd_gtls.so >/dev/null 2>&1 || need+=(rsyslog-gnutls) # ... over TLS
command -v promtool >/dev/null || need+=(prometheus)                         # checks and tests the alert rules
command -v chromium >/dev/null || need+=(chromium)                           # the review page's browser test
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)              # the test cluster's pod network
command -v containerd >/dev/null || need+=(containerd)                        # ... and its second containerd
command -v openssl >/dev/null || need+=(openssl)                              # ... and its certificates
command -v crun >/dev/null || need+=(crun)                                    # templates with runtime crun
if [ ${#need[@]} -gt 0 ]; then
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

"$(dirname "$0")/engine.sh"
"$(dirname "$0")/crun.sh"
