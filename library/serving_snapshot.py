#!/usr/bin/python
"""Ansible module: keep a verified copy of the original serving unit and its files on the host."""

DOCUMENTATION = r"""
---
module: serving_snapshot
short_description: Verified snapshot of the original unit, drop-ins and EnvironmentFiles
description:
  - Copies each file into C(dest)/files/ (mode 0600, directory 0700), checks every copy's
    sha256 against its source, then writes C(dest)/manifest.json with paths, hashes, modes,
    owners and the unit's enabled/active state. This is the restore recipe.
  - An existing snapshot that still matches the files is kept (changed=false). One that
    differs is never overwritten unless C(replace) - the message names each changed file
    with both hashes.
  - Supports check mode (reports what it would do, writes nothing).
options:
  unit:
    description: The original unit's name.
    type: str
    required: true
  files:
    description: Files to keep, as returned by serving_recipe (path, kind).
    type: list
    elements: dict
    required: true
  state:
    description: The unit's state to record (UnitFileState, ActiveState, ...).
    type: dict
    default: {}
  dest:
    description: Snapshot folder on the host.
    type: path
    required: true
  replace:
    description: Replace a snapshot whose files differ from the current ones.
    type: bool
    default: false
author: serving-rollout
"""

EXAMPLES = r"""
- name: Keep the original
  serving_snapshot:
    unit: sglang.service
    files: "{{ recipe.files }}"
    state: "{{ recipe.unit }}"
    dest: /var/lib/serving-rollout/sglang.service
"""

RETURN = r"""
manifest:
  description: The snapshot manifest (unit, state, files with sha256).
  type: dict
  sample: {unit: sglang.service, files: [{path: /etc/systemd/system/sglang.service}]}
  returned: always
snapshot_path:
  description: Folder holding the manifest and copies.
  type: str
  sample: /var/lib/serving-rollout/sglang.service
  returned: always
both_versions:
  description: "Each changed file's both versions (a unit's diff, an EnvironmentFile's changed variable names; values
    redacted) - when a snapshot is replaced, or refused because the files changed."
  type: list
  sample: []
  elements: str
  returned: when an existing snapshot differs from the files
changed_files:
  description: Each file that differs from the snapshot, with both hashes' first 12 characters.
  type: list
  elements: str
  returned: when the files changed and the snapshot was not replaced (the failure)
  sample: ["/etc/systemd/system/sglang.service: snapshot 3f9a0c1d2e4b now 77ab01c9d3e2"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import exit_with
from ansible.module_utils.snapshot_take import take


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "files": {"type": "list", "elements": "dict", "required": True},
            "state": {"type": "dict", "default": {}},
            "dest": {"type": "path", "required": True},
            "replace": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    exit_with(module, take, p["unit"], p["files"], p["state"], p["dest"], p["replace"], module.check_mode)


if __name__ == "__main__":
    main()
