"""nvml_facts with real NVML readings from a 2x H200 host, replayed through RecordedNvml."""

import copy
import json

import pytest
from conftest import FIXTURES
from recorded_nvml import NVML_P2P_CAPS_INDEX_READ, RecordedNvml

from serving_rollout.module_utils import nvml_facts

REAL = FIXTURES / "h200x2-real"


@pytest.fixture
def readings():
    observation = json.loads((REAL / "p2p-support-observation.json").read_text())
    return observation["nvml"]["readings"]


def test_real_readings_decode_to_names(readings):
    result = nvml_facts.summarize(readings)
    assert result["driver_version"] == "580.159.04" and result["cuda_driver_version"] == "13.0"
    assert result["gpu_count"] == 2 and result["all_pairs_p2p_ok"]
    pair = result["pairs"][0]
    assert pair["p2p_status"] == {"READ": "OK", "WRITE": "OK", "NVLINK": "OK", "ATOMICS": "OK",
                                  "PCI": "NOT_SUPPORTED"}
    # NVSwitch: remotes read FFFFFFFF:FF:FF.0, nvidia-smi topo shows NV18, NVML's ancestor PHB.
    assert pair["topology"] == "NV18" and pair["nvlink_via"] == "switch"
    assert pair["common_ancestor"] == "PHB"
    gpu = result["gpus"][0]
    assert gpu["bus_id_sysfs"] == "0000:00:06.0" and gpu["name"] == "NVIDIA H200"
    assert gpu["power_w"]["enforced"] == 700.0 and gpu["power_w"]["min"] == 200.0
    assert gpu["clock_event_reasons"] == ["GpuIdle"] and gpu["power_or_thermal_events"] == []
    assert gpu["active_nvlinks"] == 18


def test_collect_inits_once_and_passes_integer_read_index(readings):
    nvml = RecordedNvml(readings)
    result = nvml_facts.collect(nvml)
    assert nvml.inits == 1 and nvml.shutdowns == 1
    assert result["available"] and result["pairs"][1]["p2p_status"]["READ"] == "OK"
    # a faithful round trip of the recorded host; its driver readings predate the versioned memory call, so the
    # first call is read and named as the fallback
    kept = [{k: v for k, v in g.items() if k not in ("memory_call", "memory_reserved")}
            for g in result["readings"]["gpus"]]
    assert {**result["readings"], "gpus": kept} == readings
    fallback = "v1 (fallback: nvmlDeviceGetMemoryInfo: NVMLError: Function Not Found;"
    assert all(g["memory_call"].startswith(fallback) for g in result["gpus"])
    with pytest.raises(TypeError):  # what the library's own READ constant does
        nvml.nvmlDeviceGetP2PStatus(0, 1, NVML_P2P_CAPS_INDEX_READ)


def test_no_driver_is_unavailable_with_reason(readings):
    result = nvml_facts.collect(RecordedNvml(readings, fail_init="Driver Not Loaded"))
    assert result == {"available": False, "reason": "nvmlInit failed: Driver Not Loaded"}


def test_no_gpu_is_unavailable(readings):
    empty = {**readings, "gpus": [], "pairs": []}
    result = nvml_facts.collect(RecordedNvml(empty))
    assert result["available"] is False and result["reason"] == "NVML reports no GPUs"


def test_missing_binding_function_and_refused_readings_are_named(readings):
    changed = copy.deepcopy(readings)
    changed["gpus"][0]["power"]["usage_mw"] = {"error": "Not Supported"}
    nvml = RecordedNvml(changed, missing={"nvmlDeviceGetNvLinkRemotePciInfo"})
    raw = nvml_facts.read_readings(nvml)
    assert raw["gpus"][0]["power"]["usage_mw"] == {
        "error": "nvmlDeviceGetPowerUsage: NVMLError: Not Supported"}
    assert raw["gpus"][0]["nvlinks"][0]["remote_bus_id"] is None
    summary = nvml_facts.summarize(raw)
    assert summary["gpus"][0]["power_w"]["usage"] is None


def test_clock_events_power_and_thermal():
    assert nvml_facts.decode_clock_events(0x4 | 0x40 | 0x1) == ["GpuIdle", "SwPowerCap", "HwThermalSlowdown"]
    assert nvml_facts.decode_clock_events({"error": "x"}) is None


def test_p2p_not_ok_and_pcie_topology(readings):
    changed = copy.deepcopy(readings)
    for gpu in changed["gpus"]:
        gpu["nvlinks"] = []
    for pair in changed["pairs"]:
        pair["p2p"].update({"READ": 1, "NVLINK": 5})
        pair["common_ancestor"] = 20
    result = nvml_facts.summarize(changed)
    assert not result["all_pairs_p2p_ok"]
    assert result["pairs"][0]["p2p_status"]["READ"] == "CHIPSET_NOT_SUPPORTED"
    assert result["pairs"][0]["topology"] == "PXB"


def test_a_gpu_busy_with_no_process_is_wedged_and_a_busy_one_with_its_engine_is_not():
    readings = [{"index": 0, "util_pct": 100, "power_w": 412.0}, {"index": 1, "util_pct": 100, "power_w": 380.0},
                {"index": 2, "util_pct": 0, "power_w": 71.0}]
    processes = [{"gpu": 1, "pid": 4242}]
    assert nvml_facts.wedged_gpus(readings, processes) == [{"index": 0, "util_pct": 100, "power_w": 412.0}]
    assert nvml_facts.wedged_gpus(readings, processes, util_pct=101) == []
    assert nvml_facts.wedged_gpus([], []) == []


def test_memory_is_read_as_nvidia_smi_reads_it_with_the_reserved_memory_apart(readings):
    """On a driver with nvmlDeviceGetMemoryInfo_v2 the capture reads it: `used` leaves out what the driver reserves
    (nvidia-smi's Reserved), which the first call counts as used - an idle GPU then reads hundreds of MiB used.
    Constructed from the H200 pair's idle reading (615 MiB used by the first call): 614 MiB reserved, 1 MiB used."""
    v2 = json.loads(json.dumps(readings))
    for gpu in v2["gpus"]:
        gpu.update(memory_call="v2", memory_reserved=614 * 2**20, memory_used=1 * 2**20)
    nvml = RecordedNvml(v2)
    first = nvml.nvmlDeviceGetMemoryInfo(0)
    assert first.used // 2**20 == 615  # what the capture read before
    result = nvml_facts.collect(nvml)
    gpu = result["gpus"][0]
    assert (gpu["memory_used_mib"], gpu["memory_reserved_mib"], gpu["memory_call"]) == (1, 614, "v2")
