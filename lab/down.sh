#!/usr/bin/env bash
# Remove every container the lab started: the lab hosts (serving-lab-*: bin/lab-run's, bin/test's workers', the
# fleet's, the real-engine host), molecule's scenario hosts (molecule-*) and an image build left half-way
# (serving-rollout-lab-*), and the lab's Prometheus. The images stay (the next start is fast). LAB_CONTAINER=NAME removes that one alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
if [ -n "${LAB_CONTAINER:-}" ]; then
  names=$LAB_CONTAINER
else
  names=$(podman ps -a --format '{{.Names}}' | grep -E '^(serving-lab-|molecule-|serving-rollout-lab-)' || true)
fi
for name in $names; do
  podman rm -f -t 5 "$name" >/dev/null 2>&1 || true
  echo "removed lab container $name"
done
[ -n "$names" ] || echo "no lab container to remove"
# The lab's Prometheus (lab/prometheus-up.sh), when it runs.
if [ -z "${LAB_CONTAINER:-}" ] && [ -f "$here/.prometheus/pid" ]; then
  kill "$(cat "$here/.prometheus/pid")" 2>/dev/null && echo "stopped the lab prometheus" || true
  rm -f "$here/.prometheus/pid"
fi
