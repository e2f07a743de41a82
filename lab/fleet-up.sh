#!/usr/bin/env bash
# Start and provision the lab fleet: three lab hosts (serving-lab-gpu-1..3, SSH on
# 127.0.0.1:2222..2224), each with the original serving unit. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Its first host is lab/up.sh's (LAB_CONTAINER, LAB_SSH_PORT: a test worker's own host).
"$here/up.sh"
for n in 2 3; do
  LAB_CONTAINER="serving-lab-gpu-$n" LAB_SSH_PORT=$((2221 + n)) "$here/up.sh"
done
cd "$here/.."
ansible-playbook -i inventory/lab-fleet playbooks/lab-provision.yml >/dev/null
echo "lab fleet: lab-gpu-1..3 provisioned"
