#!/usr/bin/env bash
# Start the lab's Prometheus (Debian's prometheus package) on 127.0.0.1:9391, scraping every host of the inventory
# (default inventory/lab-fleet) each second: its targets are written from the inventory by
# playbooks/lab-prometheus.yml, a file per inventory (another inventory's hosts stay). Idempotent: a running one
# reads the new targets. lab/down.sh stops it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
inventory=${1:-inventory/lab-fleet}
port=${LAB_PROMETHEUS_PORT:-9391}
dir="$here/.prometheus"
cd "$here/.."
command -v prometheus >/dev/null || { echo "prometheus is not installed: bin/setup installs Debian's" >&2; exit 1; }
name=$(basename "$inventory")
mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9  # two test workers starting it at once: one starts it, the other finds it running (Prometheus never
         # inherits the lock: 9>&- below)
ansible-playbook -i "$inventory" playbooks/lab-prometheus.yml -e "lab_inventory_name=$name" >/dev/null
if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
  curl -fsS -X POST "http://127.0.0.1:$port/-/reload" >/dev/null
elif curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then
  echo "lab prometheus: 127.0.0.1:$port answers, but not as this checkout's ($dir/pid): stop it (another" \
       "checkout's lab/down.sh) first" >&2
  exit 1
else
  nohup prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$port" --web.enable-lifecycle --log.level=warn >"$dir/prometheus.log" 2>&1 9>&- &
  echo $! > "$dir/pid"
fi
want=$(grep -c 'targets:' "$dir/targets/$name.yml")
for _ in $(seq 1 60); do
  up=$(curl -fsS "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=count(up{lab_inventory=\"$name\"} == 1)" 2>/dev/null |
       python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' \
       2>/dev/null || echo 0)
  if [ "$up" = "$want" ]; then echo "lab prometheus: 127.0.0.1:$port scraping the $up engines of $name"; exit 0; fi
  sleep 0.5
done
echo "lab prometheus: $up of the $want engines of $name up after 30 s; see $dir/prometheus.log" >&2
exit 1
