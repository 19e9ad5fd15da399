#!/usr/bin/env bash
# Builds a real Vault server from the pinned modules in tools/vault (Vault's own Go module; no
# Vault package exists for Debian and no download site is reachable) and links it to bin/vault.
# The binary is cached outside the checkout, keyed by the tools module's go.sum, so only the first
# run pays the build (about 6 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
key=$(cat tools/vault/go.mod tools/vault/go.sum tools/vault/main.go | sha256sum | cut -c1-16)
out="$cache/vault-$key/vault"
if [ ! -x "$out" ]; then
	echo "vault: building Vault from tools/vault (first time only; several minutes)"
	mkdir -p "$cache/vault-$key"
	(cd tools/vault && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$out.tmp" .)
	mv "$out.tmp" "$out"
fi
mkdir -p bin
ln -sfn "$out" bin/vault
