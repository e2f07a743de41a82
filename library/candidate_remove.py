#!/usr/bin/python
"""Ansible module: take a candidate unit back off the host."""

DOCUMENTATION = r"""
---
module: candidate_remove
short_description: Remove a candidate unit, its drop-ins, its EnvironmentFile copies and its failed state
description:
  - Removes the candidate's unit file and drop-in folder under /etc/systemd/system, a managed candidate's Quadlet
    file and drop-in folder under /etc/containers/systemd (docs/managed-mode.md), and the candidate's own
    EnvironmentFile copies in C(state_dir)/C(unit)/candidate-env (the originals are never touched).
  - Reloads systemd when a unit file or drop-in went, then clears the candidate's failed state when systemd still
    holds one (a candidate that was killed or crashed would otherwise leave the host degraded; its record is the
    run's evidence, not systemd's).
  - Does not stop the candidate (engine_stop does, within the tool's deadline).
  - changed=true when anything was removed or reset. In check mode it reports what it would remove and changes
    nothing.
options:
  candidate_unit:
    description: The candidate unit's name.
    type: str
    required: true
  unit:
    description: The original unit, whose state folder holds the candidate's EnvironmentFile copies.
    type: str
    required: true
  state_dir:
    description: The tool's state folder on the host.
    type: path
    required: true
author: serving-rollout
"""

EXAMPLES = r"""
- name: Remove the candidate unit
  candidate_remove:
    candidate_unit: sglang-candidate.service
    unit: sglang.service
    state_dir: /var/lib/serving-rollout
"""

RETURN = r"""
removed:
  description: The paths removed (or that would be, in check mode).
  type: list
  sample: [/etc/systemd/system/sglang-candidate.service]
  elements: str
  returned: always
reset_failed:
  description: Whether the candidate's failed state was cleared.
  type: bool
  sample: false
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import host_run
from ansible.module_utils.host_files import remove_path
from ansible.module_utils.put_back import candidate_paths


def main():
    module = AnsibleModule(argument_spec={
        "candidate_unit": {"type": "str", "required": True},
        "unit": {"type": "str", "required": True},
        "state_dir": {"type": "path", "required": True}}, supports_check_mode=True)
    p = module.params
    if not p["candidate_unit"] or "/" in p["candidate_unit"]:
        module.fail_json(msg=f"candidate_unit must be a unit name, got {p['candidate_unit']!r}")
    units, copies = candidate_paths(p["candidate_unit"], p["unit"], p["state_dir"])
    removed = [path for path in units + copies if os.path.lexists(path)]
    if module.check_mode:
        module.exit_json(changed=bool(removed), removed=removed, reset_failed=False)
    for path in removed:
        try:
            remove_path(path)
        except OSError as exc:
            module.fail_json(msg=f"cannot remove {path}: {exc}", removed=removed)
    if set(removed) & set(units):
        rc, out, err = host_run(module, ["systemctl", "daemon-reload"])
        if rc != 0:
            module.fail_json(msg=f"systemctl daemon-reload failed (rc {rc}): {err.strip()}", removed=removed)
    failed = host_run(module, ["systemctl", "is-failed", "--quiet", p["candidate_unit"]])[0] == 0
    if failed:
        rc, out, err = host_run(module, ["systemctl", "reset-failed", p["candidate_unit"]])
        if rc != 0:
            module.fail_json(msg=f"systemctl reset-failed {p['candidate_unit']} failed (rc {rc}): {err.strip()}",
                             removed=removed)
    module.exit_json(changed=bool(removed) or failed, removed=removed, reset_failed=failed)


if __name__ == "__main__":
    main()
