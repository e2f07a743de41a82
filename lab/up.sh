#!/usr/bin/env bash
# Start the lab serving host: a systemd container from the lab image. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
image=${LAB_IMAGE:-localhost/serving-rollout-lab:bookworm-ssh-podman}
port=${LAB_SSH_PORT:-2222}
key="$here/.ssh/id_ed25519"
name=${LAB_CONTAINER:-serving-lab-gpu-1}

"$here/build-image.sh"
# --privileged: podman inside the lab host runs container units (nested containers need it).
# The controller reaches the lab host over SSH on loopback, as it reaches real hosts.
if [ ! -f "$key" ]; then
  mkdir -p "$here/.ssh" && chmod 700 "$here/.ssh"
  ssh-keygen -q -t ed25519 -N "" -C serving-rollout-lab -f "$key"
fi
running=$(podman container inspect -f '{{.State.Running}} {{.ImageName}}' "$name" 2>/dev/null || true)
# podman's record can say "running" for a container whose processes are gone (the machine
# was restarted under it): only a container that answers an exec is reused.
if [ "$running" = "true $image" ] && ! podman exec "$name" true >/dev/null 2>&1; then
  echo "lab host $name: podman lists it running but it does not answer; recreating"
  running=stale
fi
if [ "$running" != "true $image" ]; then
  podman rm -f "$name" >/dev/null 2>&1 || true
  echo "starting lab host $name (ssh on 127.0.0.1:$port)"
  # LAB_RUN_ARGS: more podman run options for this host (the real-engine host's /dev/shm and mounts).
  # lab/python: the lab's bytecode cache for the modules Ansible runs on the host (lab_zipimport_cache.py).
  site=/usr/local/lib/python3.11/dist-packages
  # shellcheck disable=SC2086
  podman run -d --name "$name" --hostname "$name" --systemd=always --privileged -p "127.0.0.1:$port:22" \
    -v "$here/python/lab_zipimport_cache.py:$site/lab_zipimport_cache.py:ro" \
    -v "$here/python/lab-zipimport-cache.pth:$site/lab-zipimport-cache.pth:ro" \
    ${LAB_RUN_ARGS:-} "$image" /sbin/init >/dev/null
fi
for _ in $(seq 1 60); do
  state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
  case "$state" in
    running) # Add this checkout's key (another checkout sharing the lab keeps its own).
             podman exec -i "$name" sh -c 'mkdir -p -m 700 /root/.ssh && k=$(cat) &&
               { grep -qxF "$k" /root/.ssh/authorized_keys 2>/dev/null || echo "$k" >> /root/.ssh/authorized_keys; }' < "$key.pub"
             for _ in $(seq 1 40); do
               if ssh -q -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
                   -i "$key" -p "$port" root@127.0.0.1 true 2>/dev/null; then
                 echo "lab host $name: systemd $state, ssh ready on 127.0.0.1:$port"; exit 0
               fi
               sleep 0.5
             done
             echo "lab host $name: ssh on 127.0.0.1:$port does not answer" >&2; exit 1 ;;
    degraded) echo "lab host $name: systemd degraded" >&2
              podman exec "$name" systemctl --failed --no-pager >&2; exit 1 ;;
  esac
  sleep 0.5
done
echo "lab host $name: systemd did not reach running (last: ${state:-none})" >&2
exit 1
