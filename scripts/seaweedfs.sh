#!/usr/bin/env bash
# Builds SeaweedFS's weed (Apache-2.0: an S3-compatible object store) from the pinned modules in
# tools/seaweedfs (SeaweedFS's own Go module; no Debian package of an S3 server builds it) and
# links it to bin/weed, for the S3 snapshot store's tests and `airlock up`. The binary is cached
# outside the checkout, keyed by the tools module's go.sum, so only the first run pays the build
# (about 7 minutes on 2 cores, and 40 s of module downloads).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
key=$(cat tools/seaweedfs/go.mod tools/seaweedfs/go.sum tools/seaweedfs/main.go | sha256sum | cut -c1-16)
out="$cache/seaweedfs-$key/weed"
if [ ! -x "$out" ]; then
	echo "seaweedfs: building weed from tools/seaweedfs (first time only; several minutes)"
	mkdir -p "$cache/seaweedfs-$key"
	(cd tools/seaweedfs && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$out.tmp" .)
	mv "$out.tmp" "$out"
fi
mkdir -p bin
ln -sfn "$out" bin/weed
