#!/usr/bin/env bash
# Start the lab serving host: a systemd container from the lab image. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
image=${LAB_IMAGE:-localhost/serving-rollout-lab:bookworm}
name=${LAB_CONTAINER:-serving-lab-gpu-1}

"$here/build-image.sh"
if [ "$(podman container inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" != "true" ]; then
  podman rm -f "$name" >/dev/null 2>&1 || true
  echo "starting lab host $name"
  podman run -d --name "$name" --hostname "$name" --systemd=always "$image" /sbin/init >/dev/null
fi
for _ in $(seq 1 60); do
  state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
  case "$state" in
    running) echo "lab host $name: systemd $state"; exit 0 ;;
    degraded) echo "lab host $name: systemd degraded" >&2
              podman exec "$name" systemctl --failed --no-pager >&2; exit 1 ;;
  esac
  sleep 0.5
done
echo "lab host $name: systemd did not reach running (last: ${state:-none})" >&2
exit 1
