#!/usr/bin/env bash
# Remove the lab serving host container (the image stays).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
podman rm -f -t 5 "${LAB_CONTAINER:-serving-lab-gpu-1}" >/dev/null 2>&1 || true
echo "lab host removed"
