#!/usr/bin/env bash
# Real run on a one-GPU device machine (nvidia-h100-x1 or nvidia-h200), as one batch (issue 66):
# nvidia-smi -q -x beside NVML's raw readings (both memory calls), capture.yml with a local
# connection, gpu_free (the GPU-idle proof) with a real CUDA process holding 1 GiB and after it is
# killed, peer-path.yml on one GPU and with a GPU list naming a GPU the host lacks, and tests/gpu.
# Everything lands in $OUT/results.tar.gz (the device tool returns at most 8 files).
# shellcheck source=bench/device_env.sh
source "$(dirname "$0")/device_env.sh"
res=/tmp/results; mkdir -p "$res"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
common=(-i localhost, -c local -e "ansible_python_interpreter=$py" -e "observation_writer_dir=/tmp/evidence")
adhoc() { ansible -i localhost, -c local localhost -e "ansible_python_interpreter=$py" -o "$@"; }
{ nvidia-smi; nvidia-smi -L; nvidia-smi topo -m; uname -r; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())'; } > "$res/nvidia-smi.txt" 2>&1
nvidia-smi -q -x > "$res/nvidia-smi-q-idle.xml"
python3 bench/device_nvml_raw.py > "$res/nvml-raw-idle.json" 2>&1

start=$(date +%s%N)
ansible-playbook "${common[@]}" playbooks/capture.yml -e capture_hosts=localhost \
  -e host_facts_include_readings=true > "$res/capture.log" 2>&1
echo "capture.yml rc=$? wall_ms=$(ms "$start")" | tee "$res/timings.txt"

# A real CUDA process holding 1 GiB: the idle proof must name it, then find the GPU free.
python3 -c "import torch,time; x=torch.empty(1<<30, dtype=torch.uint8, device='cuda:0'); x.fill_(1); torch.cuda.synchronize(); print('holding', flush=True); time.sleep(60)" > "$res/holder.txt" 2>&1 &
holder=$!
for _ in $(seq 60); do grep -q holding "$res/holder.txt" && break; sleep 0.5; done
echo "holder pid=$holder" >> "$res/timings.txt"
adhoc -m gpu_free > "$res/gpu_free_busy.txt" 2>&1
nvidia-smi -q -x > "$res/nvidia-smi-q-busy.xml"
python3 bench/device_nvml_raw.py > "$res/nvml-raw-busy.json" 2>&1
kill "$holder"; wait "$holder" 2>/dev/null; sleep 2
adhoc -m gpu_free > "$res/gpu_free_idle.txt" 2>&1

for gpus in '[0,1]' '[]'; do
  start=$(date +%s%N)
  timeout 150 ansible-playbook "${common[@]}" playbooks/peer-path.yml -e peer_path_hosts=localhost \
    -e "peer_path_python=$py" -e "{\"peer_path_gpus\": $gpus}" > "$res/peer-path-gpus${gpus//[^0-9]/}.log" 2>&1
  echo "peer-path.yml gpus=$gpus rc=$? wall_ms=$(ms "$start")" | tee -a "$res/timings.txt"
done
python3 bench/nvml_vs_smi.py "$res/nvml-raw-idle.json" "$res/nvidia-smi-q-idle.xml" > "$res/nvml-vs-smi-idle.txt" 2>&1
python3 bench/nvml_vs_smi.py "$res/nvml-raw-busy.json" "$res/nvidia-smi-q-busy.xml" > "$res/nvml-vs-smi-busy.txt" 2>&1
cp -r /tmp/evidence "$res/evidence" 2>/dev/null
PYTHONSAFEPATH=1 python3 -m pytest -q -p no:cacheprovider tests/gpu > "$res/tests-gpu.txt" 2>&1
echo "tests/gpu rc=$?" >> "$res/timings.txt"
tar -C "$res" -czf "$out/results.tar.gz" .
cat "$res/timings.txt" "$res/nvml-vs-smi-idle.txt"; tail -3 "$res/tests-gpu.txt"; tail -25 "$res/capture.log"
