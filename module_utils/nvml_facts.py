"""NVML facts: read raw numbers from an NVML binding (`read_readings`), then decode them
into names (`summarize`). `summarize` is pure and is tested with recorded real readings.

nvidia-ml-py 13.6xx defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a trailing comma
in its source), which ctypes cannot pass; this module never uses the library's index
constants and passes its own integers.
"""

P2P_CAPS_INDEX = {"READ": 0, "WRITE": 1, "NVLINK": 2, "ATOMICS": 3, "PCI": 4}
P2P_STATUS = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED",
              3: "IOH_TOPOLOGY_NOT_SUPPORTED", 4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED",
              6: "UNKNOWN"}
TOPOLOGY_LEVEL = {0: "INTERNAL", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
CLOCK_EVENT_REASONS = (("GpuIdle", 0x1), ("ApplicationsClocksSetting", 0x2), ("SwPowerCap", 0x4),
                       ("HwSlowdown", 0x8), ("SyncBoost", 0x10), ("SwThermalSlowdown", 0x20),
                       ("HwThermalSlowdown", 0x40), ("HwPowerBrakeSlowdown", 0x80),
                       ("DisplayClockSetting", 0x100))
POWER_OR_THERMAL = {"SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown",
                    "HwPowerBrakeSlowdown"}
MAX_NVLINKS = 18
CLOCK_SM, CLOCK_MEM = 1, 2  # NVML_CLOCK_SM, NVML_CLOCK_MEM
TEMPERATURE_GPU = 0


def wedged_gpus(readings, processes, util_pct=90):
    """GPUs busy with no compute process on them: [{index, util_pct, power_w}].

    After a collective is killed a GPU can stay at full utilisation and high power with no process
    left (operators report it wedged until a reset); starting an engine on it would hang. readings
    are NVML's per-GPU {index, util_pct, power_w}; processes are NVML's compute processes {gpu, pid}."""
    held = {p.get("gpu") for p in processes or []}
    return [dict(r) for r in readings if r["index"] not in held and r["util_pct"] >= util_pct]


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _call(nvml, name, *args):
    """A reading, or {"error": "..."} when NVML refuses it (not supported, no permission)
    or this nvidia-ml-py lacks the function."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return {"error": f"{name}: not in this nvidia-ml-py"}
    try:
        value = fn(*args)
    except Exception as exc:  # NVMLError and ctypes errors alike become a named reason
        return {"error": f"{name}: {type(exc).__name__}: {exc}"}
    return _text(value)


def nvml_bus_id_to_sysfs(bus_id):
    """'00000000:17:00.0' -> '0000:17:00.0'."""
    domain, _, rest = (bus_id or "").partition(":")
    if not rest:
        return None
    return f"{domain[-4:]}:{rest}".lower()


def read_memory(nvml, handle):
    """Memory as nvidia-smi reads it: the versioned call (nvmlDeviceGetMemoryInfo_v2), whose `used` leaves out
    what the driver reserves (shown apart, as nvidia-smi's Reserved); on a driver or binding without it, the first
    call - whose `used` counts the reserved memory too - named as the fallback with why."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    why = "nvmlMemory_v2: not in this nvidia-ml-py"
    if version is not None:
        v2 = _call(nvml, "nvmlDeviceGetMemoryInfo", handle, version)
        if not isinstance(v2, dict):
            return {"memory_call": "v2", "memory_total": v2.total, "memory_used": v2.used,
                    "memory_reserved": v2.reserved}
        why = v2["error"]
    v1 = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    return {"memory_call": f"v1 (fallback: {why}; used includes the driver's reserved memory)",
            "memory_total": v1 if isinstance(v1, dict) else v1.total,
            "memory_used": v1 if isinstance(v1, dict) else v1.used, "memory_reserved": None}


def read_gpu(nvml, index, handle):
    pci = _call(nvml, "nvmlDeviceGetPciInfo", handle)
    memory = read_memory(nvml, handle)
    nvlinks = []
    for link in range(MAX_NVLINKS):
        state = _call(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if isinstance(state, dict):
            continue
        remote = _call(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        nvlinks.append({"link": link, "active": bool(state),
                        "remote_bus_id": None if isinstance(remote, dict) else _text(remote.busId)})
    processes = _call(nvml, "nvmlDeviceGetComputeRunningProcesses", handle)
    return {
        "index": index,
        "name": _call(nvml, "nvmlDeviceGetName", handle),
        "uuid": _call(nvml, "nvmlDeviceGetUUID", handle),
        "bus_id": pci if isinstance(pci, dict) else _text(pci.busId),
        **memory,
        "power": {
            "enforced_mw": _call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle),
            "limit_mw": _call(nvml, "nvmlDeviceGetPowerManagementLimit", handle),
            "default_mw": _call(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle),
            "constraints_mw": _call(nvml, "nvmlDeviceGetPowerManagementLimitConstraints", handle),
            "usage_mw": _call(nvml, "nvmlDeviceGetPowerUsage", handle),
        },
        "clocks": {
            "sm_mhz": _call(nvml, "nvmlDeviceGetClockInfo", handle, CLOCK_SM),
            "mem_mhz": _call(nvml, "nvmlDeviceGetClockInfo", handle, CLOCK_MEM),
            "sm_max_mhz": _call(nvml, "nvmlDeviceGetMaxClockInfo", handle, CLOCK_SM),
            "mem_max_mhz": _call(nvml, "nvmlDeviceGetMaxClockInfo", handle, CLOCK_MEM),
        },
        "temperature_c": _call(nvml, "nvmlDeviceGetTemperature", handle, TEMPERATURE_GPU),
        "clock_event_reasons": _call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle),
        "nvlinks": nvlinks,
        "processes": processes if isinstance(processes, dict) else [
            {"pid": p.pid, "used_memory": p.usedGpuMemory} for p in processes],
    }


def read_readings(nvml):
    """Raw readings of every GPU and ordered pair. The caller owns nvmlInit/nvmlShutdown."""
    count = nvml.nvmlDeviceGetCount()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    readings = {
        "driver_version": _call(nvml, "nvmlSystemGetDriverVersion"),
        "cuda_driver_version": _call(nvml, "nvmlSystemGetCudaDriverVersion_v2"),
        "gpus": [read_gpu(nvml, i, h) for i, h in enumerate(handles)],
        "pairs": [],
    }
    for i, first in enumerate(handles):
        for j, second in enumerate(handles):
            if i == j:
                continue
            readings["pairs"].append({
                "i": i, "j": j,
                "p2p": {name: _call(nvml, "nvmlDeviceGetP2PStatus", first, second, idx)
                        for name, idx in P2P_CAPS_INDEX.items()},
                "common_ancestor": _call(nvml, "nvmlDeviceGetTopologyCommonAncestor", first, second),
            })
    return readings


def decode_clock_events(mask):
    if not isinstance(mask, int):
        return None
    return [name for name, bit in CLOCK_EVENT_REASONS if mask & bit]


def decode_cuda_version(code):
    return f"{code // 1000}.{code % 1000 // 10}" if isinstance(code, int) else None


def _watts(milliwatts):
    return milliwatts / 1000 if isinstance(milliwatts, int) else None


def nvlink_count(links_i, links_j, bus_j, nvlink_status):
    """NVLinks between two GPUs, and how: (count, 'direct' | 'switch' | None).

    Direct links name the peer's bus id. Through NVSwitch (HGX boards) the remote reads
    FFFFFFFF:FF:FF.0 for every link; then NVML's NVLINK P2P status says whether the pair
    talks over the fabric, and each GPU reaches a peer with all its active links, so the
    count is the smaller of the two (nvidia-smi topo shows NV18 on an H200 pair).
    """
    direct = sum(1 for link in links_i if link["active"] and link["remote_bus_id"] == bus_j)
    if direct:
        return direct, "direct"
    if nvlink_status == 0:
        active_i = sum(1 for link in links_i if link["active"])
        active_j = sum(1 for link in links_j if link["active"])
        if active_i and active_j:
            return min(active_i, active_j), "switch"
    return 0, None


def summarize_gpu(gpu):
    power = gpu["power"]
    constraints = power.get("constraints_mw")
    reasons = decode_clock_events(gpu["clock_event_reasons"])
    links = [link for link in gpu["nvlinks"] if link["active"]]
    bus_id = gpu["bus_id"] if isinstance(gpu["bus_id"], str) else None
    return {
        "index": gpu["index"], "name": gpu["name"], "uuid": gpu["uuid"],
        "bus_id": bus_id, "bus_id_sysfs": nvml_bus_id_to_sysfs(bus_id),
        "memory_total_mib": gpu["memory_total"] // 2**20 if isinstance(gpu["memory_total"], int) else None,
        "memory_used_mib": gpu["memory_used"] // 2**20 if isinstance(gpu["memory_used"], int) else None,
        "memory_reserved_mib": gpu["memory_reserved"] // 2**20 if isinstance(gpu.get("memory_reserved"), int)
        else None,
        # readings recorded before the versioned call was read were the first call's
        "memory_call": gpu.get("memory_call", "v1 (recorded before the versioned call was read)"),
        "power_w": {
            "enforced": _watts(power.get("enforced_mw")), "limit": _watts(power.get("limit_mw")),
            "default": _watts(power.get("default_mw")), "usage": _watts(power.get("usage_mw")),
            "min": _watts(constraints[0]) if isinstance(constraints, list | tuple) else None,
            "max": _watts(constraints[1]) if isinstance(constraints, list | tuple) else None,
        },
        "clocks_mhz": gpu["clocks"],
        "temperature_c": gpu["temperature_c"],
        "clock_event_reasons": reasons,
        "power_or_thermal_events": sorted(POWER_OR_THERMAL & set(reasons or [])),
        "active_nvlinks": len(links),
        "compute_processes": gpu["processes"],
    }


def summarize(readings):
    """Decode raw readings into names: statuses, topology levels, clock-event reasons."""
    gpus = [summarize_gpu(g) for g in readings["gpus"]]
    bus_by_index = {g["index"]: g["bus_id"] for g in gpus}
    links_by_index = {g["index"]: g["nvlinks"] for g in readings["gpus"]}
    pairs = []
    for pair in readings["pairs"]:
        i, j = pair["i"], pair["j"]
        nvlinks, via = nvlink_count(links_by_index[i], links_by_index[j], bus_by_index[j],
                                    pair["p2p"].get("NVLINK"))
        ancestor = pair["common_ancestor"]
        status = {name: (P2P_STATUS.get(value, f"UNKNOWN({value})") if isinstance(value, int)
                         else value) for name, value in pair["p2p"].items()}
        pairs.append({
            "i": i, "j": j,
            "p2p_status": status,
            # NCCL needs both READ and WRITE.
            "p2p_ok": status.get("READ") == "OK" and status.get("WRITE") == "OK",
            "common_ancestor": TOPOLOGY_LEVEL.get(ancestor, ancestor)
            if isinstance(ancestor, int) else ancestor,
            "nvlinks": nvlinks,
            "nvlink_via": via,
            "topology": f"NV{nvlinks}" if nvlinks else (
                TOPOLOGY_LEVEL.get(ancestor, "UNKNOWN") if isinstance(ancestor, int) else "UNKNOWN"),
        })
    return {
        "available": True,
        "driver_version": readings["driver_version"],
        "cuda_driver_version": decode_cuda_version(readings["cuda_driver_version"]),
        "gpu_count": len(gpus),
        "gpus": gpus,
        "pairs": pairs,
        "all_pairs_p2p_ok": bool(pairs) and all(p["p2p_ok"] for p in pairs),
        "compute_process_count": sum(len(g["compute_processes"]) for g in gpus
                                     if isinstance(g["compute_processes"], list)),
    }


def collect(nvml):
    """Init NVML once, read, shut down; `available: False` with the reason on any failure."""
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return {"available": False, "reason": f"nvmlInit failed: {exc}"}
    try:
        readings = read_readings(nvml)
    except Exception as exc:
        return {"available": False, "reason": f"reading NVML failed: {exc}"}
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # shutting down is best effort; the readings stand
            pass
    if not readings["gpus"]:
        return {"available": False, "reason": "NVML reports no GPUs", "readings": readings}
    result = summarize(readings)
    result["readings"] = readings
    return result
