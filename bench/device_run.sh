#!/usr/bin/env bash
# Real-GPU run on the device machine (nvidia-h200-x2 or larger), as one batch:
# capture.yml and peer-path.yml with a local connection, their timings, the nvml_info
# timing, and the reference loops. Results land flat in $OUT (the device tool returns them).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 ANSIBLE_FORCE_COLOR=0
out=${OUT:-/tmp/device-out}; mkdir -p "$out"
py=$(command -v python3)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
ap() { python3 -m ansible playbook "$@" 2>/dev/null || python3 /tmp/site/bin/ansible-playbook "$@"; }
common=(-i localhost, -c local -e "ansible_python_interpreter=$py" -e "observation_writer_dir=/tmp/evidence")
nvidia-smi -L > "$out/nvidia-smi.txt"; nvidia-smi topo -m >> "$out/nvidia-smi.txt"

start=$(date +%s.%N)
ansible-playbook "${common[@]}" playbooks/capture.yml -e capture_hosts=localhost \
  -e host_facts_include_readings=true > "$out/capture.log" 2>&1
echo "capture.yml rc=$? wall_s=$(echo "$(date +%s.%N) - $start" | bc)" | tee "$out/timings.txt"

python3 bench/bench_nvml_info.py 5 > "$out/bench_nvml_info.json" 2>&1

start=$(date +%s.%N)
ansible-playbook "${common[@]}" playbooks/peer-path.yml -e peer_path_hosts=localhost \
  -e "peer_path_python=$py" > "$out/peer-path.log" 2>&1
echo "peer-path.yml rc=$? wall_s=$(echo "$(date +%s.%N) - $start" | bc)" | tee -a "$out/timings.txt"

for f in /tmp/evidence/localhost/*/*.json; do cp "$f" "$out/"; done
python3 bench/reference_p2p.py "$out/peer-path-observation.json" > "$out/reference.json" 2> "$out/reference.err"
tail -5 "$out/capture.log" "$out/peer-path.log"; cat "$out/timings.txt" "$out/bench_nvml_info.json" "$out/reference.json"
ls -la "$out"
