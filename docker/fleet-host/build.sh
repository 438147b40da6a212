#!/usr/bin/env bash
# Build the fleet lab's host image without a registry: mmdebstrap writes a minimal Debian bookworm rootfs
# with an SSH server and Python (what Ansible needs on a managed host) and `docker import` turns it into
# an image. Used by `invoke fleet.lab` (devtasks/fleet_lab.py) when the image is missing.
#
#   docker/fleet-host/build.sh [TAG]        TAG defaults to sparkgate/fleet-host:bookworm
#
# Environment: SPARKGATE_DEBIAN_MIRROR and SPARKGATE_DEBIAN_SECURITY_MIRROR, as for docker/build-base.sh.
#
# No Docker packages: a lab host drives the machine's own Docker engine through its socket with the
# machine's docker CLI and Compose plugin, mounted read-only at start, so its stacks are sibling
# containers and its compose version is the one CI tests. SSH host keys are removed from the image and
# made when a lab host starts, so no two lab hosts (or labs) share one.
set -euo pipefail

tag=${1:-sparkgate/fleet-host:bookworm}
suite=bookworm
mirror=${SPARKGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${SPARKGATE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
packages=python3,openssh-server,procps,iproute2,ca-certificates
hooks=/usr/share/mmdebstrap/hooks/merged-usr

die() { echo "fleet-host: $*" >&2; exit 1; }
command -v mmdebstrap >/dev/null || die "mmdebstrap not found; install it with: apt-get install --no-install-recommends mmdebstrap"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || die "no Docker engine answers; start dockerd first (see docs/images.md)"
[ -d "$hooks" ] || die "$hooks missing; mmdebstrap >= 1.3 ships it"
[ "$(id -u)" -eq 0 ] || die "run as root (mmdebstrap's root mode builds the rootfs with real ownership)"

# A stream cut short by a failing mmdebstrap must never end up under the real tag.
scratch="${tag%%:*}:partial-$$"
start=$SECONDS
echo "fleet-host: mmdebstrap $suite ($packages) | docker import -> $tag"
# shellcheck disable=SC2016 # "$1" (the rootfs path) is expanded by mmdebstrap, not here
if mmdebstrap --quiet --variant=apt --mode=root \
    --hook-dir="$hooks" \
    --include="$packages" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/etc/ssh/ssh_host_*' \
    "$suite" - \
    "deb $mirror $suite main" \
    "deb $mirror $suite-updates main" \
    "deb $security $suite-security main" \
  | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL io.sparkgate.fleet-host.suite=$suite io.sparkgate.fleet-host.packages=$packages" \
    - "$scratch" >/dev/null; then
  docker tag "$scratch" "$tag"
  docker rmi "$scratch" >/dev/null
else
  docker rmi "$scratch" >/dev/null 2>&1 || true
  die "mmdebstrap or docker import failed; nothing was tagged $tag"
fi
echo "fleet-host: $tag ready in $((SECONDS - start)) s"
