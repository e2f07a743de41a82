"""Device helper: NVML's raw readings as the capture reads them, plus both memory calls
(nvmlDeviceGetMemoryInfo v1 and _v2), as JSON on stdout. Compared with `nvidia-smi -q -x`
in tests/fixtures/<machine>/ (bench/device_one_gpu.sh)."""
import json

import pynvml

from serving_rollout.module_utils.nvml_facts import read_readings


def memory_calls(handle):
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    out = {"v1": {"total": v1.total, "free": v1.free, "used": v1.used}}
    try:
        v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        out["v2"] = {"total": v2.total, "reserved": v2.reserved, "free": v2.free, "used": v2.used}
    except Exception as exc:  # an older driver: record why
        out["v2"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def main():
    pynvml.nvmlInit()
    try:
        readings = read_readings(pynvml)
        count = pynvml.nvmlDeviceGetCount()
        memory = [memory_calls(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    finally:
        pynvml.nvmlShutdown()
    print(json.dumps({"readings": readings, "memory_calls": memory}, indent=1, default=str))


if __name__ == "__main__":
    main()
