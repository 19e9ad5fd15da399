#!/usr/bin/env bash
# Builds a sandbox image locally: a minimal Debian root made with debootstrap and turned into an
# image with `docker import`. No registry is reachable where airlock is built, so nothing is
# pulled. The root filesystem tarball is cached outside the checkout, keyed by what it is built
# from (suite, package list, user setup), so a second run only re-imports when the image is
# missing. The first argument names the image: default, or a toolchain (python, node), which is
# the default's packages plus the toolchain's, all from Debian.
set -euo pipefail

name=${1:-default}
suite=${AIRLOCK_IMAGE_SUITE:-bookworm}
packages="bash,coreutils,curl,git,python3,ca-certificates,procps,iproute2,dnsutils,netcat-openbsd"
# A toolchain's packages are installed with apt in the new root (debootstrap's own dependency
# resolution does not cope with npm's).
toolchain=""
case "$name" in
default) ;;
python) toolchain="python3-venv python3-pip python3-pytest python3-setuptools python3-wheel" ;;
node) toolchain="nodejs npm" ;;
*) echo "unknown sandbox image $name (default, python or node)" >&2; exit 2 ;;
esac
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
# The sandbox user's uid and gid are fixed so templates and file transfers can rely on them.
setup_version=2
key=$(printf '%s|%s|%s' "$suite" "$packages" "$setup_version" | sha256sum | cut -c1-12)
if [ -n "$toolchain" ]; then
	key=$(printf '%s|%s' "$key" "$toolchain" | sha256sum | cut -c1-12)
fi
tag="airlock/$name:$key"

if docker image inspect "$tag" >/dev/null 2>&1; then
	docker tag "$tag" "airlock/$name:latest"
	echo "sandbox image $tag is present"
	exit 0
fi

mkdir -p "$cache"
tarball="$cache/rootfs-$key.tar"
if [ ! -s "$tarball" ]; then
	command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
	root=$(mktemp -d "$cache/root.XXXXXX")
	trap 'rm -rf "$root"' EXIT
	echo "debootstrap $suite (minbase) into $root: a few minutes on a cold cache"
	debootstrap --variant=minbase --include="$packages" "$suite" "$root" >"$cache/debootstrap-$key.log" 2>&1 ||
		{ tail -20 "$cache/debootstrap-$key.log"; exit 1; }
	if [ -n "$toolchain" ]; then
		echo "installing the $name toolchain ($toolchain) from Debian"
		cp /etc/resolv.conf "$root/etc/resolv.conf"
		mount -t proc proc "$root/proc"
		trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
		{ chroot "$root" apt-get update -qq && DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --no-install-recommends $toolchain; } \
			>>"$cache/debootstrap-$key.log" 2>&1 || { tail -20 "$cache/debootstrap-$key.log"; exit 1; }
		umount "$root/proc"
		chroot "$root" apt-get clean
		: >"$root/etc/resolv.conf"
	fi
	chroot "$root" groupadd --gid 10001 sandbox
	chroot "$root" useradd --uid 10001 --gid 10001 --home-dir /workspace --no-create-home --shell /bin/bash sandbox
	mkdir -p "$root/workspace" "$root/etc/airlock"
	chown 10001:10001 "$root/workspace"
	# No setuid or setgid file: no-new-privileges already stops them from raising privileges,
	# and this leaves nothing for it to stop (su, passwd, mount and the like lose the bits).
	find "$root" -xdev -type f \( -perm -4000 -o -perm -2000 \) -exec chmod ug-s {} +
	if [ -n "$(find "$root" -xdev -type f \( -perm -4000 -o -perm -2000 \) | head -1)" ]; then
		echo "sandbox image: setuid or setgid files are left" >&2; exit 1
	fi
	# Nothing in the image may hold a credential; drop apt lists and caches to keep it small.
	rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin "$root/usr/share/doc" "$root/usr/share/man"
	tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
fi
docker import \
	--change 'USER 10001:10001' \
	--change 'WORKDIR /workspace' \
	--change 'ENV HOME=/workspace PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["/bin/sh"]' \
	"$tarball" "$tag" >/dev/null
docker tag "$tag" "airlock/$name:latest"
echo "sandbox image $tag imported"
