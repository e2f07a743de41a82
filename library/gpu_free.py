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
    list is empty or a deadline passes. Read-only; supports check mode.
options:
  timeout_s:
    description: Wait up to this many seconds for the processes to exit (0 - look once).
    type: float
    default: 0
  pattern:
    description: Regular expression over /proc/*/cmdline, used when NVML is not available.
    type: str
    default: ""
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
"""

RETURN = r"""
source:
  description: nvml or process-scan.
  type: str
  returned: always
processes:
  description: pid, systemd unit, command line or (NVML) gpu and memory of each process.
  type: list
  returned: always
waited_s:
  description: Seconds waited for the processes to exit.
  type: float
  returned: always
"""

import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
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


def main():
    module = AnsibleModule(argument_spec={"pattern": {"type": "str", "default": ""},
                                          "timeout_s": {"type": "float", "default": 0}},
                           supports_check_mode=True)
    # Waits inside one call (polling every second) so a wait that ends well prints no failed retries.
    started = time.monotonic()
    source, found = find(module)
    while found and time.monotonic() - started < module.params["timeout_s"]:
        time.sleep(1.0)
        source, found = find(module)
    module.exit_json(changed=False, source=source, processes=found, waited_s=time.monotonic() - started)


if __name__ == "__main__":
    main()
