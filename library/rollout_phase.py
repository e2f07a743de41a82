#!/usr/bin/python
"""Ansible module: record a rollout's phase on the host and tell the controller."""

DOCUMENTATION = r"""
---
module: rollout_phase
short_description: Record the rollout's phase in the host's state file
description:
  - Writes C(state_dir)/C(unit)/state.json (whole or not at all, mode 0600) naming the unit, its
    candidate, the phase and, while a run is under way, the run id. Once restored, what is in
    place is the original whichever run put it back, so the run id is left out and repeating a
    rollback rewrites nothing (changed=false when the file already says the same).
  - Returns the fact C(rollout_progress), which bin/serving-rollout reads from ansible-runner's
    events (never a task's name). A lock refusal names the phase this file holds.
  - In check mode it reports what it would write and writes nothing.
options:
  state_dir:
    description: The tool's state folder on the host (the unit's folder under it must exist).
    type: path
    required: true
  unit:
    description: The serving unit.
    type: str
    required: true
  candidate_unit:
    description: The candidate unit.
    type: str
    required: true
  phase:
    description: The phase.
    type: str
    required: true
    choices: [stopping-original, candidate-starting, candidate-running, restoring, restored]
  run_id:
    description: This run's id.
    type: str
    required: true
author: serving-rollout
"""

EXAMPLES = r"""
- name: Record the phase
  rollout_phase:
    state_dir: /var/lib/serving-rollout
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    phase: stopping-original
    run_id: "{{ run_id }}"
"""

RETURN = r"""
state:
  description: What the state file holds now.
  type: dict
  sample: {phase: candidate-running, run_id: 20261205T120000Z}
  returned: always
ansible_facts:
  description: rollout_progress - kind phase, the phase and the run id.
  type: dict
  sample: {rollout_progress: {kind: phase, phase: candidate-running, run_id: 20261205T120000Z}}
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_files import write_atomic
from ansible.module_utils.put_back import phase_record


def main():
    module = AnsibleModule(argument_spec={
        "state_dir": {"type": "path", "required": True},
        "unit": {"type": "str", "required": True},
        "candidate_unit": {"type": "str", "required": True},
        "phase": {"type": "str", "required": True, "choices": ["stopping-original", "candidate-starting",
                                                               "candidate-running", "restoring", "restored"]},
        "run_id": {"type": "str", "required": True}}, supports_check_mode=True)
    p = module.params
    record = phase_record(p["unit"], p["candidate_unit"], p["phase"], p["run_id"])
    path = os.path.join(p["state_dir"], p["unit"], "state.json")
    content = json.dumps(record, indent=4, sort_keys=True) + "\n"
    try:
        with open(path) as handle:
            changed = handle.read() != content
    except OSError:
        changed = True
    if changed and not module.check_mode:
        try:
            write_atomic(path, content, 0o600)
        except OSError as exc:
            module.fail_json(msg=f"cannot record the phase {p['phase']} in {path}: {exc}")
    module.exit_json(changed=changed, state=record, ansible_facts={"rollout_progress": {
        "kind": "phase", "phase": p["phase"], "run_id": p["run_id"]}})


if __name__ == "__main__":
    main()
