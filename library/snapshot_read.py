#!/usr/bin/python
"""Ansible module: read what rollback restores from - the original's snapshot, or proof that there is none
to need."""

DOCUMENTATION = r"""
---
module: snapshot_read
short_description: Read the original's snapshot and whether a promotion is to be undone
description:
  - Reads C(state_dir)/C(unit)/manifest.json (the restore recipe serving_snapshot wrote) and whether
    C(state_dir)/C(unit)/promoted.json exists (a promotion rollback undoes).
  - A host without a snapshot was never changed by serving-rollout - nothing to restore. That is said only of a
    unit systemd reports active and enabled, with no candidate unit installed in C(unit_dir); otherwise it fails
    naming what it found (a candidate without a snapshot means the snapshot was lost mid-run).
  - Reads both units' systemd state and returns C(clean) - nothing is left to put back (no candidate loaded or
    running, the original active and never restarted on its own, no promotion to undo) - so rollback.yml can say
    "nothing to restore" even where its lock cannot be written (a full state folder).
  - Read-only; it changes nothing and runs the same under check mode.
options:
  unit: {description: The original serving unit., type: str, required: true}
  candidate_unit: {description: The candidate's unit., type: str, required: true}
  state_dir: {description: "The tool's state folder on the host.", type: path, required: true}
  unit_dir: {description: Where a candidate unit would be installed., type: path, default: /etc/systemd/system}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Look for the original's snapshot
  snapshot_read:
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    state_dir: /var/lib/serving-rollout
  register: rollout_snapshot
"""

RETURN = r"""
found:
  description: Whether the snapshot exists.
  type: bool
  sample: true
  returned: always
manifest:
  description: The snapshot manifest (unit, state, files with sha256), or null without one.
  type: dict
  sample: {unit: sglang.service, files: []}
  returned: always
promoted:
  description: Whether a promotion record is there (rollback returns to the snapshot's original).
  type: bool
  sample: false
  returned: always
promoted_run_id:
  description: The run whose promotion the record names ("unreadable" for a record that cannot be read).
  type: str
  sample: 20261207T071336Z
  returned: when a snapshot is found
clean:
  description: Whether nothing is left to put back (read from systemd's state of both units and the promotion record).
  type: bool
  returned: always
  sample: true
state:
  description: "The unit's ActiveState, UnitFileState, LoadState, NRestarts and InvocationID, read when there is no
    snapshot (empty otherwise)."
  type: dict
  sample: {ActiveState: active}
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import exit_with, runner
from ansible.module_utils.snapshot_reading import read_snapshot


def main():
    module = AnsibleModule(argument_spec={
        "unit": {"type": "str", "required": True},
        "candidate_unit": {"type": "str", "required": True},
        "state_dir": {"type": "path", "required": True},
        "unit_dir": {"type": "path", "default": "/etc/systemd/system"}}, supports_check_mode=True)
    exit_with(module, read_snapshot, runner(module), module.params)


if __name__ == "__main__":
    main()
