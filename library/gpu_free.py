#!/usr/bin/python
"""Ansible module: list processes holding the GPUs (NVML, or a process scan without NVML)."""

DOCUMENTATION = r"""
---
module: gpu_free
short_description: List the compute processes on the GPUs
description:
  - With NVML (nvidia-ml-py), the compute processes of every GPU.
  - Without it (the lab), processes whose command line matches C(pattern).
  - Workers that outlive a stopped server are a known failure; callers retry until the
    list is empty or a deadline passes. Read-only unless C(terminate) - supports check mode.
  - With C(terminate), the processes still holding the GPUs that belong to the stopped engine
    (command line matching C(engine_pattern), or in the cgroup of one of C(engine_units)) are
    terminated - SIGTERM, then SIGKILL after C(grace_s) - and named in C(terminated) (changed=true);
    any other process is never touched and is named in C(foreign). In check mode it changes nothing.
options:
  timeout_s:
    description: Wait up to this many seconds for the processes to exit (0 - look once).
    type: float
    default: 0
  pattern:
    description: Regular expression over /proc/*/cmdline, used when NVML is not available.
    type: str
    default: ""
  terminate:
    description: Terminate what of the stopped engine still holds the GPUs (after the wait).
    type: bool
    default: false
  engine_pattern:
    description: Regular expression over a process's command line that makes it the engine's own (its orphans).
    type: str
    default: ""
  engine:
    description: >-
      The engine: its adapter's worker titles (VLLM::EngineCore, sglang::scheduler_TP0, which orphans
      keep) make a process the engine's own too.
    type: str
    default: unknown
    choices: [sglang, vllm, unknown]
  wedged_util_pct:
    description: >-
      With NVML, a GPU this busy (utilisation, percent) with no compute process after the wait is wedged -
      a killed collective left it spinning until a reset; returned in C(wedged), never touched.
    type: float
    default: 90
  engine_units:
    description: systemd units whose processes are the engine's (the original and the candidate).
    type: list
    elements: str
    default: []
  grace_s:
    description: Seconds between SIGTERM and SIGKILL.
    type: float
    default: 10
  require_free:
    description: >-
      Fail unless the GPUs end free - no process left on them (after the wait and, with C(terminate), the
      termination) and none wedged - naming what holds them (module_utils/gpu_release.py).
    type: bool
    default: false
author: serving-rollout
"""

EXAMPLES = r"""
- name: Wait until the GPUs are free
  gpu_free:
    pattern: "sglang|vllm"
  register: gpus
  until: gpus.processes | length == 0
  retries: 30
  delay: 2

- name: Wait up to 60 s, terminate what of the stopped engine still holds the GPUs, fail unless they are free
  gpu_free:
    pattern: "sglang|vllm"
    timeout_s: 60
    terminate: true
    engine: sglang
    engine_units: [sglang.service, sglang-candidate.service]
    require_free: true
"""

RETURN = r"""
source:
  description: nvml or process-scan.
  type: str
  sample: nvml
  returned: always
processes:
  description: pid, systemd unit, command line or (NVML) gpu and memory of each process.
  type: list
  sample: [{pid: 4242, unit: sglang.service, gpu: 0}]
  returned: always
waited_s:
  description: Seconds waited for the processes to exit.
  type: float
  sample: 1.0
  returned: always
terminated:
  description: The engine's processes that were terminated (pid, cmdline redacted, unit, signal that ended them).
  type: list
  sample: []
  returned: with terminate
foreign:
  description: Processes holding the GPUs that are not the engine's; never touched.
  type: list
  sample: []
  returned: with terminate
wedged:
  description: >-
    GPUs busy with no compute process (index, utilisation, power), or null without NVML (not measurable).
  type: list
  sample: []
  returned: always
summary:
  description: How long the wait took and which processes were terminated, for the console (empty when free at once).
  type: str
  sample: GPUs free after 1.0 s
  returned: always
"""

import os
import re
import signal
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_adapters import process_title_pattern
from ansible.module_utils.gpu_release import release_problem, release_summary
from ansible.module_utils.nvml_facts import wedged_gpus
from ansible.module_utils.unit_recipe import redact_argv


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


def find(module):
    processes = nvml_processes()
    if processes is not None:
        return "nvml", processes
    if not module.params["pattern"]:
        module.fail_json(msg="NVML is not available and no process pattern was given to find GPU workers")
    try:
        return "process-scan", scan_processes(module.params["pattern"])
    except re.error as exc:
        module.fail_json(msg=f"pattern {module.params['pattern']!r} is not a regular expression: {exc}")


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


def finish(module, **result):
    """Exit with the console summary; with require_free, fail when the GPUs are not free."""
    p = module.params
    summary = release_summary(result["waited_s"], result.get("terminated") or [])
    problem = release_problem(result["source"], result["processes"], result.get("foreign") or [],
                              result["wedged"] or [], p["timeout_s"]) if p["require_free"] else None
    if problem:
        module.fail_json(msg=f"{summary}; {problem}" if summary else problem, summary=summary, **result)
    module.exit_json(summary=summary, **result)


def main():
    module = AnsibleModule(argument_spec={"pattern": {"type": "str", "default": ""},
                                          "timeout_s": {"type": "float", "default": 0},
                                          "terminate": {"type": "bool", "default": False},
                                          "engine_pattern": {"type": "str", "default": ""},
                                          "engine_units": {"type": "list", "elements": "str", "default": []},
                                          "engine": {"type": "str", "default": "unknown",
                                                     "choices": ["sglang", "vllm", "unknown"]},
                                          "wedged_util_pct": {"type": "float", "default": 90},
                                          "grace_s": {"type": "float", "default": 10},
                                          "require_free": {"type": "bool", "default": False}},
                           supports_check_mode=True)
    # Waits inside one call (polling every second) so a wait that ends well prints no failed retries.
    started = time.monotonic()
    source, found = find(module)
    while found and time.monotonic() - started < module.params["timeout_s"]:
        time.sleep(1.0)
        source, found = find(module)
    p = module.params
    if not p["terminate"] or not found:
        readings = nvml_busy() if source == "nvml" else None
        wedged = None if readings is None else wedged_gpus(readings, found, p["wedged_util_pct"])
        finish(module, changed=False, source=source, processes=found, waited_s=time.monotonic() - started,
               wedged=wedged, **({"terminated": [], "foreign": []} if p["terminate"] else {}))
    titles = process_title_pattern(p["engine"])
    engine_pattern = "|".join(x for x in (p["engine_pattern"], titles) if x)
    try:
        engines = [f for f in found if is_engines(f, engine_pattern, p["engine_units"])]
    except re.error as exc:
        module.fail_json(msg=f"engine_pattern {p['engine_pattern']!r} is not a regular expression: {exc}")
    foreign = [f for f in found if f not in engines]
    waited_s = time.monotonic() - started
    ended = [] if module.check_mode or not engines else terminate(engines, p["grace_s"])
    time.sleep(0.5 if ended else 0)  # a killed process leaves the GPU a moment after its exit
    source, left = find(module)
    readings = nvml_busy() if source == "nvml" else None
    finish(module, changed=bool(ended) or (module.check_mode and bool(engines)), source=source, processes=left,
           terminated=engines if module.check_mode else ended, foreign=foreign, waited_s=waited_s,
           wedged=None if readings is None else wedged_gpus(readings, left, p["wedged_util_pct"]))


if __name__ == "__main__":
    main()
