#!/usr/bin/env bash
# Build an image without a registry: mmdebstrap writes a minimal Debian bookworm rootfs as a tar stream and
# `docker import` turns it into an image. Two images, one recipe:
#
#   docker/build-base.sh [TAG]               the CI/local base (`invoke images.base`); TAG defaults to
#                                            sparkgate/base:bookworm
#   docker/build-base.sh --fleet-host [TAG]  the fleet lab's host image (devtasks/fleet_lab.py builds it when
#                                            missing, CI during its set-up); TAG defaults to sparkgate/fleet-host:bookworm
#
# Environment: SPARKGATE_DEBIAN_MIRROR (default http://deb.debian.org/debian) and
# SPARKGATE_DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security).
#
# Base contents: python3 + python3-venv (the venv module bundles pip; python3-pip would drag in a large
# dependency set), procps and iproute2 (testinfra's process and socket modules need ps and ss inside
# the container), haproxy (the gateway image), ca-certificates.
# Fleet host contents: an SSH server and Python (what Ansible needs on a managed host), procps, iproute2,
# ca-certificates. No Docker packages: a lab host drives the machine's own Docker engine through its socket with
# the machine's docker CLI and Compose plugin, mounted read-only at start, so its stacks are sibling containers and
# its compose version is the one CI tests. SSH host keys are removed from the image and made when a lab host
# starts, so no two lab hosts (or labs) share one.
# Both: docs, man pages, locales and apt lists are left out. The merged-usr hook keeps mmdebstrap from installing
# usrmerge, which pulls in perl.
set -euo pipefail

kind=base
packages=python3,python3-venv,procps,iproute2,haproxy,ca-certificates
# What the customize hook removes; "$1" (the rootfs path) is expanded by mmdebstrap, not here.
# shellcheck disable=SC2016
remove='"$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin'
if [ "${1:-}" = "--fleet-host" ]; then
  shift
  kind=fleet-host
  packages=python3,openssh-server,procps,iproute2,ca-certificates
  # shellcheck disable=SC2016
  remove+=' "$1"/etc/ssh/ssh_host_*'
fi
tag=${1:-sparkgate/$kind:bookworm}
suite=bookworm
mirror=${SPARKGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${SPARKGATE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
hooks=/usr/share/mmdebstrap/hooks/merged-usr

die() { echo "build-base ($kind): $*" >&2; exit 1; }
command -v mmdebstrap >/dev/null || die "mmdebstrap not found; install it with: apt-get install --no-install-recommends mmdebstrap"
command -v docker >/dev/null || die "docker CLI not found"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || die "no Docker engine answers; start dockerd first (see docs/images.md)"
[ -d "$hooks" ] || die "$hooks missing; mmdebstrap >= 1.3 ships it"
[ "$(id -u)" -eq 0 ] || die "run as root (mmdebstrap's root mode builds the rootfs with real ownership)"

# Import under a scratch tag first: a stream cut short by a failing mmdebstrap must never end up
# under the real tag.
scratch="${tag%%:*}:partial-$$"
start=$SECONDS
echo "build-base ($kind): mmdebstrap $suite ($packages) | docker import -> $tag"
if mmdebstrap --quiet --variant=apt --mode=root \
    --hook-dir="$hooks" \
    --include="$packages" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook="rm -rf $remove" \
    "$suite" - \
    "deb $mirror $suite main" \
    "deb $mirror $suite-updates main" \
    "deb $security $suite-security main" \
  | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL io.sparkgate.$kind.suite=$suite io.sparkgate.$kind.packages=$packages" \
    - "$scratch" >/dev/null; then
  docker tag "$scratch" "$tag"
  docker rmi "$scratch" >/dev/null
else
  docker rmi "$scratch" >/dev/null 2>&1 || true
  die "mmdebstrap or docker import failed; nothing was tagged $tag"
fi
size=$(docker image inspect --format '{{.Size}}' "$tag")
echo "build-base ($kind): $tag ready in $((SECONDS - start)) s ($((size / 1000000)) MB)"
