#!/usr/bin/python
"""Ansible module: read GPUs, P2P status, topology, power, clocks and processes through NVML."""

DOCUMENTATION = r"""
---
module: nvml_info
short_description: Read NVML facts that decide whether GPU peer-to-peer transport is safe
description:
  - Uses nvidia-ml-py on the managed host, with one nvmlInit per run.
  - Returns driver and CUDA driver versions, per GPU name, UUID, bus id (NVML and sysfs
    forms), memory, power limits, clocks, temperature, decoded clock-event reasons,
    active NVLinks, compute processes; per ordered pair the P2P status for READ, WRITE,
    NVLINK, ATOMICS, PCI by name and the topology level (PIX/PXB/PHB/NODE/SYS or NV#).
  - Passes its own P2P index integers, working around nvidia-ml-py's READ constant,
    which is a tuple in 13.6xx.
  - Read-only; supports check mode. No driver or no GPU gives C(available=false) and the reason.
options:
  include_readings:
    description: Also return the raw NVML readings (for fixtures).
    type: bool
    default: false
author: serving-rollout
requirements:
  - nvidia-ml-py on the managed host's Python
"""

EXAMPLES = r"""
- name: Read NVML facts
  nvml_info:
  register: nvml
"""

RETURN = r"""
nvml:
  description: The NVML observation.
  returned: always
  type: dict
  contains:
    available:
      description: Whether NVML could be read.
      type: bool
    reason:
      description: Why not, when not available.
      type: str
    driver_version:
      description: Driver version.
      type: str
    cuda_driver_version:
      description: CUDA driver API version, e.g. 13.0.
      type: str
    gpus:
      description: Per GPU facts.
      type: list
      elements: dict
    pairs:
      description: Per ordered pair P2P status by name and topology level.
      type: list
      elements: dict
    all_pairs_p2p_ok:
      description: READ and WRITE are OK for every ordered pair.
      type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.nvml_facts import collect


def main():
    module = AnsibleModule(argument_spec={"include_readings": {"type": "bool", "default": False}},
                           supports_check_mode=True)
    try:
        import pynvml
    except ImportError as exc:
        module.exit_json(changed=False, nvml={"available": False,
                                              "reason": f"nvidia-ml-py is not installed: {exc}"})
    result = collect(pynvml)
    if not module.params["include_readings"]:
        result.pop("readings", None)
    module.exit_json(changed=False, nvml=result)


if __name__ == "__main__":
    main()
