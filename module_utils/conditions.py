"""What can disturb a timing, per chunk of requests, and whether two arms ran under the same
conditions. Pure: no numpy, so it runs on the serving host inside latency_cell too."""

import statistics

# Host CPU busy fraction differing by more than 35 points, runnable processes (the median of
# /proc/stat procs_running over the chunk) 1.5 apart, CPU steal above 5 %, GPU temperature 10 C
# apart, GPU power 15 % apart, different clock-event reasons or processes on the GPUs.
CONDITION_LIMITS = {"cpu_busy": 0.35, "cpu_steal": 0.05, "cpu_runnable": 1.5, "temp_c": 10.0, "power_frac": 0.15}
# NVML clock-event reasons that are not a disturbance (an idle GPU between requests, set clocks).
BENIGN_CLOCK_EVENTS = {"GpuIdle", "ApplicationsClocksSetting", "DisplayClockSetting"}


def cpu_times(stat_text):
    """(busy, total, steal) jiffies from the first line of /proc/stat."""
    fields = [int(v) for v in stat_text.splitlines()[0].split()[1:]]
    fields += [0] * (8 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total - idle - iowait, total, steal


def procs_running(stat_text):
    """Runnable processes right now (the procs_running line of /proc/stat), or None."""
    for line in stat_text.splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    return None


def cpu_conditions(before, after):
    """Busy and steal fractions of the whole machine between two cpu_times readings."""
    busy, total, steal = (a - b for a, b in zip(after, before, strict=True))
    return {"cpu_busy": busy / total if total > 0 else None, "cpu_steal": steal / total if total > 0 else None}


def conditions_problem(baseline_conditions, candidate_conditions, limits):
    """Why the arms ran under different conditions (a string), or None. Conditions per arm:
    cpu_busy (fraction of the machine busy), cpu_steal, clock_events (NVML reasons seen),
    temp_c, power_w (medians), gpu_processes; limits: cpu_busy, cpu_steal, temp_c,
    power_frac."""
    if not baseline_conditions or not candidate_conditions:
        return None
    a, b = baseline_conditions, candidate_conditions
    found = []
    if a.get("cpu_busy") is not None and b.get("cpu_busy") is not None \
            and abs(b["cpu_busy"] - a["cpu_busy"]) > limits["cpu_busy"]:
        found.append(f"host CPU busy {a['cpu_busy']:.0%} (baseline) vs {b['cpu_busy']:.0%} (candidate)")
    if a.get("cpu_runnable") is not None and b.get("cpu_runnable") is not None \
            and abs(b["cpu_runnable"] - a["cpu_runnable"]) > limits.get("cpu_runnable", 1.5):
        found.append(f"runnable processes {a['cpu_runnable']:g} vs {b['cpu_runnable']:g}")
    if max(a.get("cpu_steal") or 0, b.get("cpu_steal") or 0) > limits["cpu_steal"]:
        found.append(f"CPU steal {a.get('cpu_steal') or 0:.1%} vs {b.get('cpu_steal') or 0:.1%}")
    if sorted(a.get("clock_events") or []) != sorted(b.get("clock_events") or []):
        found.append(f"clock events {a.get('clock_events') or []} vs {b.get('clock_events') or []}")
    if a.get("temp_c") is not None and b.get("temp_c") is not None \
            and abs(b["temp_c"] - a["temp_c"]) > limits["temp_c"]:
        found.append(f"GPU temperature {a['temp_c']:.0f} vs {b['temp_c']:.0f} C")
    if a.get("power_w") and b.get("power_w") and abs(b["power_w"] / a["power_w"] - 1) > limits["power_frac"]:
        found.append(f"GPU power {a['power_w']:.0f} vs {b['power_w']:.0f} W")
    if (a.get("gpu_processes") or 0) != (b.get("gpu_processes") or 0):
        found.append(f"processes on the GPUs {a.get('gpu_processes') or 0} vs "
                     f"{b.get('gpu_processes') or 0}")
    return "; ".join(found) or None



def median_conditions(chunks):
    """One arm's conditions from its chunks': medians of the numbers, the union of clock events."""
    def median(values):
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    chunks = [c for c in chunks if c]
    if not chunks:
        return None
    out = {key: median(c.get(key) for c in chunks)
           for key in ("cpu_busy", "cpu_steal", "cpu_runnable", "temp_c", "power_w")}
    out["clock_events"] = sorted({e for c in chunks for e in c.get("clock_events") or []})
    out["gpu_processes"] = max((c.get("gpu_processes") or 0) for c in chunks)
    return out
