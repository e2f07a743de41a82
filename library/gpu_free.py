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

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_release import free_gpus
from ansible.module_utils.host_commands import exit_with


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
    exit_with(module, free_gpus, module.params, module.check_mode)


if __name__ == "__main__":
    main()
