#!/usr/bin/env bash
# Build the lab serving host image: Debian 12 with systemd, python3 and sshd, made with
# debootstrap and imported into podman. Idempotent: does nothing if the image exists.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
image=${LAB_IMAGE:-localhost/serving-rollout-lab:bookworm-ssh}
mirror=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if podman image exists "$image"; then
  echo "lab image $image already present"
  exit 0
fi
root=$(mktemp -d /var/tmp/serving-rollout-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "building lab image $image with debootstrap (a few minutes, once)"
debootstrap --variant=minbase --include=systemd,systemd-sysv,python3,dbus,procps,openssh-server \
  bookworm "$root" "$mirror" >/dev/null
# A container boots faster without units that wait for hardware or ttys.
for unit in getty.target systemd-udevd.service systemd-udev-trigger.service \
            systemd-journald-audit.socket; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | podman import --quiet \
  --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' - "$image" >/dev/null
echo "lab image $image built"
