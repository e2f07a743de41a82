"""Every NVML field the capture keeps, compared with `nvidia-smi -q -x` on the same GPU (issue 66).

    python3 bench/nvml_vs_smi.py NVML_RAW.json SMI.xml      # a table, exit 1 on a disagreement

NVML_RAW.json is bench/device_nvml_raw.py's output (the capture's raw readings as nvml_facts reads them);
SMI.xml is `nvidia-smi -q -x` taken beside it. The capture's summary (module_utils/nvml_facts.summarize) is what
is compared, field by field, with the tolerance a live reading needs (power draw and temperature move between two
reads). tests/unit/test_nvml_vs_smi.py runs this over the committed real outputs; tests/gpu runs it live."""

import json
import re
import sys
import xml.etree.ElementTree as ET

from serving_rollout.module_utils.nvml_facts import decode_clock_events, summarize

# nvidia-smi's clock event reason tags (older drivers: clocks_throttle_reasons) -> NVML's names.
SMI_REASONS = {"gpu_idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
               "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost",
               "sw_thermal_slowdown": "SwThermalSlowdown", "hw_thermal_slowdown": "HwThermalSlowdown",
               "hw_power_brake_slowdown": "HwPowerBrakeSlowdown", "display_clock_setting": "DisplayClockSetting"}


def _number(text):
    found = re.search(r"-?\d+(?:\.\d+)?", text or "")
    return float(found.group()) if found else None


def _text(node, path):
    found = node.find(path)
    return found.text.strip() if found is not None and found.text else None


def smi_gpus(xml_text):
    """{driver, cuda, gpus: [{bus_id, name, uuid, memory, power, clocks, temperature_c, reasons, processes}]}."""
    root = ET.fromstring(xml_text)
    gpus = []
    for gpu in root.findall("gpu"):
        reasons_node = gpu.find("clocks_event_reasons")
        if reasons_node is None:
            reasons_node = gpu.find("clocks_throttle_reasons")
        reasons = sorted(name for tag, name in SMI_REASONS.items() if reasons_node is not None and any(
            child.tag.endswith(tag) and (child.text or "").strip() == "Active" for child in reasons_node))
        power = gpu.find("gpu_power_readings")
        power = gpu.find("power_readings") if power is None else power
        gpus.append({
            "bus_id": gpu.get("id"), "name": _text(gpu, "product_name"), "uuid": _text(gpu, "uuid"),
            "memory": {key: _number(_text(gpu, f"fb_memory_usage/{key}")) for key in ("total", "reserved", "used")},
            "power": {key: _number(_text(power, key)) if power is not None else None for key in (
                "current_power_limit", "default_power_limit", "min_power_limit", "max_power_limit",
                "instant_power_draw", "power_draw", "enforced_power_limit")},
            "clocks": {"sm": _number(_text(gpu, "clocks/sm_clock")), "mem": _number(_text(gpu, "clocks/mem_clock")),
                       "sm_max": _number(_text(gpu, "max_clocks/sm_clock")),
                       "mem_max": _number(_text(gpu, "max_clocks/mem_clock"))},
            "temperature_c": _number(_text(gpu, "temperature/gpu_temp")),
            "reasons": reasons,
            "processes": sorted(int(_number(_text(p, "pid"))) for p in gpu.findall("processes/process_info")),
        })
    return {"driver": _text(root, "driver_version"), "cuda": _text(root, "cuda_version"), "gpus": gpus}


def _row(field, nvml, smi, tolerance=0.0):
    if isinstance(nvml, int | float) and isinstance(smi, int | float):
        agree = abs(nvml - smi) <= tolerance
    else:
        agree = nvml == smi
    return {"field": field, "nvml": nvml, "smi": smi, "agree": agree}


def compare(raw, xml_text):
    """Rows {field, nvml, smi, agree} for every kept field of every GPU."""
    summary, smi = summarize(raw["readings"]), smi_gpus(xml_text)
    rows = [_row("driver_version", summary["driver_version"], smi["driver"]),
            _row("cuda_driver_version", summary["cuda_driver_version"], smi["cuda"])]
    for gpu, theirs in zip(summary["gpus"], smi["gpus"], strict=True):
        n = f"gpu{gpu['index']}"
        power = theirs["power"]
        draw = power["instant_power_draw"] if power["instant_power_draw"] is not None else power["power_draw"]
        limit = power["current_power_limit"] if power["current_power_limit"] is not None \
            else power["enforced_power_limit"]
        rows += [
            _row(f"{n}.bus_id", gpu["bus_id"], theirs["bus_id"]),
            _row(f"{n}.name", gpu["name"], theirs["name"]),
            _row(f"{n}.uuid", gpu["uuid"], theirs["uuid"]),
            _row(f"{n}.memory_total_mib", gpu["memory_total_mib"], theirs["memory"]["total"], 1),
            _row(f"{n}.memory_reserved_mib", gpu["memory_reserved_mib"], theirs["memory"]["reserved"], 1),
            # a live reading: the CUDA context of whatever runs beside it can move a few MiB between two reads
            _row(f"{n}.memory_used_mib", gpu["memory_used_mib"], theirs["memory"]["used"], 4),
            _row(f"{n}.power_limit_w", gpu["power_w"]["enforced"], limit, 0.5),
            _row(f"{n}.power_default_w", gpu["power_w"]["default"], power["default_power_limit"], 0.5),
            _row(f"{n}.power_min_w", gpu["power_w"]["min"], power["min_power_limit"], 0.5),
            _row(f"{n}.power_max_w", gpu["power_w"]["max"], power["max_power_limit"], 0.5),
            _row(f"{n}.power_draw_w", gpu["power_w"]["usage"], draw, 30),
            _row(f"{n}.sm_max_mhz", gpu["clocks_mhz"]["sm_max_mhz"], theirs["clocks"]["sm_max"]),
            _row(f"{n}.mem_max_mhz", gpu["clocks_mhz"]["mem_max_mhz"], theirs["clocks"]["mem_max"]),
            _row(f"{n}.mem_mhz", gpu["clocks_mhz"]["mem_mhz"], theirs["clocks"]["mem"], 1),
            _row(f"{n}.temperature_c", gpu["temperature_c"], theirs["temperature_c"], 3),
            _row(f"{n}.clock_event_reasons", sorted(decode_clock_events(raw["readings"]["gpus"][gpu["index"]][
                "clock_event_reasons"]) or []), theirs["reasons"]),
            _row(f"{n}.compute_pids", sorted(p["pid"] for p in gpu["compute_processes"]
                                             if isinstance(gpu["compute_processes"], list)), theirs["processes"]),
        ]
    return rows


def main(argv):
    raw = json.loads(open(argv[1]).read())
    rows = compare(raw, open(argv[2]).read())
    for row in rows:
        print(f"{'ok ' if row['agree'] else 'DIFF'} {row['field']:28} nvml={row['nvml']!r:32} smi={row['smi']!r}")
    return 0 if all(row["agree"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
