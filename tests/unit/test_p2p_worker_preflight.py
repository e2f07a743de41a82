"""The peer-path worker's preflight (module_utils/p2p_worker.py) on a one-GPU host: a GPU list naming a GPU the
host lacks is found before any GPU is read, so p2p_check refuses by name before copies or collectives. NVML is a
TEST DOUBLE here (a module standing in for pynvml that counts one GPU)."""

import sys
import types

from serving_rollout.module_utils import p2p_worker


def one_gpu_nvml(monkeypatch):
    calls = []
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: calls.append("init")
    fake.nvmlShutdown = lambda: calls.append("shutdown")
    fake.nvmlDeviceGetCount = lambda: 1

    def handle(index):
        calls.append(f"handle {index}")
        if index >= 1:
            raise RuntimeError("Invalid Argument")
        return index

    fake.nvmlDeviceGetHandleByIndex = handle
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return calls


def test_a_gpu_the_host_lacks_is_named_before_any_gpu_is_read(monkeypatch):
    calls = one_gpu_nvml(monkeypatch)
    out = p2p_worker.preflight({"gpus": [0, 1]})
    assert out["count"] == 1 and out["missing"] == [1] and out["gpus"] == []
    assert calls == ["init", "shutdown"]  # no handle asked for: nothing read, the caller refuses
