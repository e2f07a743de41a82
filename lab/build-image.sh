#!/usr/bin/env bash
# Build the lab serving host image: Debian 12 with systemd, python3 and sshd, made with
# debootstrap and imported into podman. Idempotent: does nothing if the image exists.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
image=${LAB_IMAGE:-localhost/serving-rollout-lab:bookworm-ssh-podman}
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
# Podman inside the lab host runs the container-unit shape for real. runc, not crun (this
# machine's hybrid cgroups), fixed ulimits (raising them is denied), and the host's cgroup tree
# mounted read-only: nested runc cannot mount a fresh cgroup filesystem inside this container.
mkdir -p "$root/etc/containers"
cat > "$root/etc/containers/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
volumes = ["/sys/fs/cgroup:/sys/fs/cgroup:ro"]

[engine]
runtime = "runc"
CONF
rm -rf "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | podman import --quiet - "$image-base" >/dev/null
# podman and runc by apt in a container: debootstrap cannot configure containers-common itself.
builder="serving-rollout-lab-build-$$"
podman rm -f "$builder" >/dev/null 2>&1 || true
podman run --name "$builder" "$image-base" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq podman runc >/dev/null && rm -rf /var/cache/apt/archives/*.deb /var/lib/apt/lists/*'
podman commit --quiet --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' "$builder" "$image" >/dev/null
podman rm -f "$builder" >/dev/null
podman rmi "$image-base" >/dev/null
echo "lab image $image built"
