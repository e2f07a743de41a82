"""The wait for free GPUs (free_gpus; library/gpu_free.py is its wrapper): who holds them (NVML, else a process
scan), the stopped engine's stragglers ended, a foreign process never touched; what it says - one line for the
console, and the reason a run cannot go on (held by processes, or wedged: busy with no process)."""

import os
import re
import signal
import time

from .engine_adapters import process_title_pattern
from .host_commands import ModuleFailure
from .nvml_facts import wedged_gpus
from .unit_recipe import redact_argv


def unit_of(pid):
    """The systemd unit (service or scope) a process runs in, from its cgroup path."""
    try:
        with open(f"/proc/{pid}/cgroup") as handle:
            for line in handle:
                for part in reversed(line.strip().split("/")):
                    if part.endswith((".service", ".scope")):
                        return part
    except OSError:
        pass
    return None


def nvml_processes():
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception:  # no binding or no driver: the process scan answers instead
        return None
    try:
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                found.append({"gpu": index, "pid": proc.pid, "used_memory": proc.usedGpuMemory,
                              "unit": unit_of(proc.pid)})
        return found
    finally:
        nvml.nvmlShutdown()


def nvml_busy():
    """Per GPU: index, utilisation (percent) and power draw (W), or None without NVML."""
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception:
        return None
    try:
        readings = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            readings.append({"index": index, "util_pct": nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                             "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0})
        return readings
    finally:
        nvml.nvmlShutdown()


def scan_processes(pattern):
    regex = re.compile(pattern)
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (me, os.getppid()):
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().decode(errors="replace").strip("\0").split("\0")
        except OSError:
            continue
        cmdline = " ".join(argv)
        if cmdline and regex.search(cmdline) and "gpu_free" not in cmdline and "AnsiballZ" not in cmdline:
            # Another process's arguments can hold secrets (--api-key ...): shown by the allow-list only.
            found.append({"pid": int(entry), "cmdline": " ".join(redact_argv(argv))[:200], "unit": unit_of(entry)})
    return found


def find(pattern):
    """("nvml", NVML's compute processes), or without NVML ("process-scan", the processes matching `pattern`)."""
    processes = nvml_processes()
    if processes is not None:
        return "nvml", processes
    if not pattern:
        raise ModuleFailure("NVML is not available and no process pattern was given to find GPU workers")
    try:
        return "process-scan", scan_processes(pattern)
    except re.error as exc:
        raise ModuleFailure(f"pattern {pattern!r} is not a regular expression: {exc}") from exc


def cmdline_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode(errors="replace").replace("\0", " ").strip()
    except OSError:
        return ""


def is_engines(process, engine_pattern, engine_units):
    """A process is the stopped engine's when its command line says so or it lives in an engine unit."""
    cmdline = cmdline_of(process["pid"])
    return bool((engine_pattern and re.search(engine_pattern, cmdline)) or process.get("unit") in engine_units)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited: only its parent's wait is missing
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def terminate(processes, grace_s):
    """SIGTERM each, SIGKILL what still lives after grace_s; returns them with the signal that ended each."""
    ended = []
    for process in processes:
        try:
            os.kill(process["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while any(alive(p["pid"]) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    for process in processes:
        signal_name = "SIGTERM"
        if alive(process["pid"]):
            signal_name = "SIGKILL"
            try:
                os.kill(process["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        ended.append({**process, "ended_by": signal_name})
    return ended



def release_summary(waited_s, terminated):
    """The console line: how long the wait took and which of the stopped engine's processes were ended
    (empty when the GPUs were free at once)."""
    parts = []
    if waited_s >= 1:
        parts.append(f"waited {waited_s:.1f} s for GPU workers to exit")
    if terminated:
        named = ", ".join(f"{p['pid']} by {p['ended_by']}" for p in terminated if "ended_by" in p)
        parts.append(f"terminated {len(terminated)} process(es) of the stopped engine still holding the GPUs: {named}")
    return "; ".join(parts)


def release_problem(source, left, foreign, wedged, timeout_s):
    """Why the GPUs are not free for the next engine, or None: processes still holding them (the foreign
    ones are named, never touched), or GPUs busy with no process (only a reset frees those)."""
    if left:
        held = ", ".join(f"{p.get('pid')} ({p.get('cmdline') or p.get('unit') or 'gpu ' + str(p.get('gpu'))})"
                         for p in left)
        message = f"GPUs still held after {timeout_s:g} s ({source}): {held}"
        if foreign:
            message += (f"; not the engine's, so not touched: {', '.join(str(p['pid']) for p in foreign)}. "
                        "Stop them (kill PID), then run rollback.yml, which starts the original once the GPUs are free")
        return message
    if wedged:
        return (f"GPU(s) wedged: {', '.join(str(g['index']) for g in wedged)} busy "
                f"({', '.join(str(g['util_pct']) for g in wedged)} % utilisation, "
                f"{', '.join(str(round(g['power_w'])) for g in wedged)} W) with no process after the engine stopped; "
                "nothing is started on them: a GPU reset is needed (nvidia-smi -r, or a reboot), then rollback.yml")
    return None


def finished(p, **result):
    """The result with its console summary; with require_free, ModuleFailure when the GPUs are not free."""
    summary = release_summary(result["waited_s"], result.get("terminated") or [])
    problem = release_problem(result["source"], result["processes"], result.get("foreign") or [],
                              result["wedged"] or [], p["timeout_s"]) if p["require_free"] else None
    if problem:
        raise ModuleFailure(f"{summary}; {problem}" if summary else problem, summary=summary, **result)
    return {"summary": summary, **result}


def wedged_of(source, found, p):
    readings = nvml_busy() if source == "nvml" else None
    return None if readings is None else wedged_gpus(readings, found, p["wedged_util_pct"])


def free_gpus(p, check_mode=False):
    """gpu_free's wait (its arguments as p): until no process holds the GPUs or timeout_s, polling every second;
    with terminate, the stopped engine's processes still holding them ended (SIGTERM, then SIGKILL after
    grace_s), a foreign one never touched. The result, or ModuleFailure."""
    started = time.monotonic()
    source, found = find(p["pattern"])
    while found and time.monotonic() - started < p["timeout_s"]:
        time.sleep(1.0)
        source, found = find(p["pattern"])
    if not p["terminate"] or not found:
        return finished(p, changed=False, source=source, processes=found, waited_s=time.monotonic() - started,
                        wedged=wedged_of(source, found, p),
                        **({"terminated": [], "foreign": []} if p["terminate"] else {}))
    engine_pattern = "|".join(x for x in (p["engine_pattern"], process_title_pattern(p["engine"])) if x)
    try:
        engines = [f for f in found if is_engines(f, engine_pattern, p["engine_units"])]
    except re.error as exc:
        raise ModuleFailure(f"engine_pattern {p['engine_pattern']!r} is not a regular expression: {exc}") from exc
    foreign = [f for f in found if f not in engines]
    waited_s = time.monotonic() - started
    ended = [] if check_mode or not engines else terminate(engines, p["grace_s"])
    time.sleep(0.5 if ended else 0)  # a killed process leaves the GPU a moment after its exit
    source, left = find(p["pattern"])
    return finished(p, changed=bool(ended) or (check_mode and bool(engines)), source=source, processes=left,
                    terminated=engines if check_mode else ended, foreign=foreign, waited_s=waited_s,
                    wedged=wedged_of(source, left, p))
