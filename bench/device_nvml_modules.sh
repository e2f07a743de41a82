#!/usr/bin/env bash
# Real NVML under the modules that otherwise run against doubles here: gpu_free (with a
# torch process holding a GPU, then without) and the latency cells' NVML telemetry.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LC_ALL=C.UTF-8
out=${OUT:-/tmp/device-out}; mkdir -p "$out"
py=$(command -v python3)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# the project's own package (serving_rollout, its module_utils), beside the wheels
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade --target /tmp/site .
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
adhoc() { ansible -i localhost, -c local localhost -e "ansible_python_interpreter=$py" -o "$@"; }
python3 -c "import torch,time; x=torch.ones(1<<28,device='cuda:1'); print('holding', flush=True); time.sleep(25)" &
holder=$!
sleep 12
adhoc -m gpu_free > "$out/gpu_free_busy.txt" 2>&1
kill $holder; wait $holder 2>/dev/null; sleep 2
adhoc -m gpu_free > "$out/gpu_free_idle.txt" 2>&1
python3 - > "$out/telemetry.json" 2>&1 <<'PY'
import json, sys, threading, time
import torch
from serving_rollout.module_utils.cells import Telemetry
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
with Telemetry(0.2) as t:
    end = time.time() + 3
    while time.time() < end:
        a @ a
    torch.cuda.synchronize()
print(json.dumps(t.summary(), indent=1))
PY
cat "$out"/*
