#!/usr/bin/python
"""Ansible module: read IOMMU groups, kernel IOMMU flags and PCIe ACS of GPU paths."""

DOCUMENTATION = r"""
---
module: iommu_info
short_description: Read IOMMU groups, their domain types and ACS on the bridges above each GPU
description:
  - Reads C(/sys/kernel/iommu_groups), C(/proc/cmdline) and the PCIe config space of every
    bridge upstream of each NVIDIA GPU, and decodes the ACS control word.
  - Read-only; supports check mode. A host with no IOMMU groups (a VM guest without a
    virtual IOMMU) returns C(enabled=false) with the reason.
  - Extended config space is readable by root only; otherwise ACS is C(unknown) with the reason.
options:
  root:
    description: Where C(sys/) and C(proc/) are read; tests point it at a fixture tree.
    type: path
    default: /
author: serving-rollout
"""

EXAMPLES = r"""
- name: Read IOMMU and ACS facts
  iommu_info:
  register: iommu

- name: Read a fixture tree
  iommu_info:
    root: /tmp/sysfs-fixture
"""

RETURN = r"""
iommu:
  description: The IOMMU observation.
  returned: always
  type: dict
  contains:
    enabled:
      description: Whether IOMMU groups exist.
      type: bool
    reasons:
      description: Why something could not be read.
      type: list
      elements: str
    cmdline_flags:
      description: iommu, iommu.passthrough, iommu.strict, intel_iommu, amd_iommu.
      type: dict
    passthrough:
      description: Whether the flags imply passthrough (null when unsaid).
      type: bool
    groups:
      description: Every group with id, type and member devices.
      type: list
      elements: dict
    gpus:
      description: Per GPU its group, group type, peers and upstream bridges with ACS.
      type: list
      elements: dict
    translated_gpu_groups:
      description: Groups of GPUs with DMA or DMA-FQ domains.
      type: list
      elements: str
    acs_redirecting_bridges:
      description: Bridges above GPUs with ACS RR or CR set.
      type: list
      elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.iommu_facts import collect


def main():
    module = AnsibleModule(argument_spec={"root": {"type": "path", "default": "/"}},
                           supports_check_mode=True)
    root = module.params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg=f"root {root!r} is not a directory")
    module.exit_json(changed=False, iommu=collect(root))


if __name__ == "__main__":
    main()
