#!/usr/bin/env bash
# Real-GPU run on the device machine (nvidia-h200-x2 or larger), as one batch:
# capture.yml and peer-path.yml with a local connection, their timings, the nvml_info
# timing, and the reference loops. Results land flat in $OUT (the device tool returns them).
# shellcheck source=bench/device_env.sh
source "$(dirname "$0")/device_env.sh"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
res=/tmp/results; mkdir -p $res
common=(-i localhost, -c local -e "ansible_python_interpreter=$py" -e "observation_writer_dir=/tmp/evidence")
nvidia-smi -L > "$res/nvidia-smi.txt"; nvidia-smi topo -m >> "$res/nvidia-smi.txt"

start=$(date +%s%N)
ansible-playbook "${common[@]}" playbooks/capture.yml -e capture_hosts=localhost \
  -e host_facts_include_readings=true > "$res/capture.log" 2>&1
echo "capture.yml rc=$? wall_ms=$(ms $start)" | tee "$res/timings.txt"

python3 bench/bench_nvml_info.py 5 > "$res/bench_nvml_info.json" 2>&1

start=$(date +%s%N)
ansible-playbook "${common[@]}" playbooks/peer-path.yml -e peer_path_hosts=localhost \
  -e "peer_path_python=$py" > "$res/peer-path.log" 2>&1
echo "peer-path.yml rc=$? wall_ms=$(ms $start)" | tee -a "$res/timings.txt"

for f in /tmp/evidence/localhost/*/*.json; do cp "$f" "$res/"; done
python3 bench/reference_p2p.py "$res/peer-path-observation.json" > "$res/reference.json" 2> "$res/reference.err"
tail -5 "$res/capture.log" "$res/peer-path.log"; cat "$res/timings.txt" "$res/bench_nvml_info.json" "$res/reference.json"
find /usr /opt -name 'libnccl.so*' 2>/dev/null | head > "$res/libnccl-paths.txt"
tar -C "$res" -czf "$out/results.tar.gz" .
cp "$res"/*.json "$res"/timings.txt "$out/" 2>/dev/null; ls -la "$res" "$out"
