#!/usr/bin/python
"""Documentation of the inventory_patch action (action_plugins/inventory_patch.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: inventory_patch
short_description: A managed host's promotion as a patch to the inventory file that holds its recipe
description:
  - Runs on the controller (an action plugin) with serving_rollout.recipe.promote; nothing on the host.
  - Finds the inventory file (host_vars or group_vars) that sets C(variable) for C(host), and writes to
    C(out_dir) the one-control change as a patch, its revert patch and the file before and after; with
    C(write), writes the inventory file itself too (changed is then true). A recipe that cannot take the
    change, or a file that cannot be found or written, fails naming it. In check mode it writes nothing.
options:
  inventory_dir: {description: The inventory's folder., type: path, required: true}
  host: {description: The host promoted., type: str, required: true}
  groups: {description: The host's groups (their group_vars are searched after its host_vars)., type: list, elements: str, default: []}
  variable: {description: The inventory variable that holds the recipe., type: str, required: true}
  change: {description: The run's one-control change., type: dict, required: true}
  out_dir: {description: Where the patches and the before/after files are written., type: path, required: true}
  write: {description: Write the inventory file too., type: bool, default: false}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Write the change as a patch to the inventory
  inventory_patch:
    inventory_dir: "{{ inventory_dir }}"
    host: "{{ inventory_hostname }}"
    groups: "{{ group_names }}"
    variable: serving_unit_recipe
    change: "{{ promotion_recipes.change.change }}"
    out_dir: "{{ promotion_patch_dir }}"
"""

RETURN = r"""
file:
  description: The inventory file that holds the recipe.
  type: str
  returned: success
  sample: inventory/lab-managed/host_vars/lab-gpu-1.yml
patch:
  description: The unified diff of that file.
  type: str
  sample: "serving_unit_recipe:\n  env:\n    NCCL_P2P_DISABLE: '0'\n"
  returned: success
written:
  description: Whether the inventory file was written.
  type: bool
  sample: true
  returned: success
out:
  description: The folder of the patches.
  type: str
  sample: /srv/serving-rollout/evidence/gpu-1/promotion-R1/inventory-patch.yml
  returned: success
"""

if __name__ == "__main__":
    raise SystemExit("inventory_patch runs on the controller as an action plugin (action_plugins/inventory_patch.py)")
