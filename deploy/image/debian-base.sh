#!/bin/sh
# A base image for the kaas image made from Debian's packages, for machines without a
# container registry: mmdebstrap builds a minimal Debian 12 (bookworm: Python 3.11) root
# file system as a tarball, and `podman import` turns it into an image.
#
#   deploy/image/debian-base.sh [IMAGE]        (default localhost/kaas-base:bookworm)
#
# Needs mmdebstrap and podman (Debian's packages) and root; CONTAINERS_CONF as the
# Makefile sets it. MIRROR overrides the Debian mirror.
set -eu
IMAGE=${1:-localhost/kaas-base:bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  --format=tar bookworm "$work/rootfs.tar" "deb $MIRROR bookworm main"
podman import --change 'CMD ["/bin/sh"]' --change 'ENV LANG=C.UTF-8' "$work/rootfs.tar" "$IMAGE"
