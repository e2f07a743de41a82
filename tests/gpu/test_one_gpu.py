"""One real GPU (a device machine: nvidia-h100-x1 or nvidia-h200): NVML read as nvidia-smi reads it, a real CUDA
process holding 1 GiB named by the capture's NVML reading and gone once killed, and a GPU list naming a GPU the
host lacks found by the peer-path preflight before any GPU work. Skipped without torch, a CUDA GPU or nvidia-smi
(never on the CI machine)."""

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pynvml = pytest.importorskip("pynvml")
if not torch.cuda.is_available() or shutil.which("nvidia-smi") is None:
    pytest.skip("needs a CUDA GPU and nvidia-smi", allow_module_level=True)

from serving_rollout.module_utils import nvml_facts, p2p_worker  # noqa: E402  (after the skip)

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("nvml_vs_smi", REPO / "bench" / "nvml_vs_smi.py")
nvml_vs_smi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nvml_vs_smi)

HOLD = ("import sys, time, torch\n"
        "x = torch.empty(1 << 30, dtype=torch.uint8, device='cuda:0'); x.fill_(1); torch.cuda.synchronize()\n"
        "print('holding', flush=True); time.sleep(120)\n")


def raw_readings():
    pynvml.nvmlInit()
    try:
        return {"readings": nvml_facts.read_readings(pynvml)}
    finally:
        pynvml.nvmlShutdown()


def test_every_kept_nvml_field_agrees_with_nvidia_smi():
    raw = raw_readings()
    xml = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, check=True).stdout
    rows = nvml_vs_smi.compare(raw, xml)
    assert [row for row in rows if not row["agree"]] == [], json.dumps(rows, indent=1)
    assert raw["readings"]["gpus"][0]["memory_call"] == "v2"  # the driver has the versioned call


def test_a_cuda_process_holding_one_gib_is_named_then_gone():
    holder = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        gpu = nvml_facts.collect(pynvml)["gpus"][0]
        held = {p["pid"]: p["used_memory"] for p in gpu["compute_processes"]}
        assert holder.pid in held and held[holder.pid] >= 2**30, gpu["compute_processes"]
    finally:
        holder.kill()
        holder.wait()
    for _ in range(50):  # the driver lets the context go shortly after the process ends (bounded, not timed)
        gpu = nvml_facts.collect(pynvml)["gpus"][0]
        if holder.pid not in {p["pid"] for p in gpu["compute_processes"]}:
            break
        time.sleep(0.2)
    assert holder.pid not in {p["pid"] for p in gpu["compute_processes"]}


def test_a_gpu_list_naming_a_gpu_the_host_lacks_is_found_before_any_gpu_work():
    count = torch.cuda.device_count()
    out = p2p_worker.preflight({"gpus": [0, count]})
    assert out["count"] == count and out["missing"] == [count] and out["gpus"] == []
