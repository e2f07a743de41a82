#!/usr/bin/python
"""Ansible module: stop a serving unit within the tool's own deadline, escalating if it ignores the stop."""

DOCUMENTATION = r"""
---
module: engine_stop
short_description: Stop a serving unit within a deadline - SIGTERM, then SIGKILL of every process, then name what lives
description:
  - Changes the host - stops the unit. Asks systemd to stop it (its ExecStop, SIGTERM), waits up to
    C(deadline_s); if it is still running (a vLLM API server with an open client stream ignores
    SIGTERM; a unit may set TimeoutStopSec=infinity), has systemd SIGKILL every process of the unit
    and waits up to C(kill_wait_s) more; fails naming the unit's processes if any still live.
  - Changes nothing and reports C(changed=false) when the unit is already inactive or failed.
  - In check mode reports whether it would stop the unit, and stops nothing.
options:
  unit:
    description: The unit to stop.
    type: str
    required: true
  deadline_s:
    description: Seconds the engine gets to stop on its own.
    type: float
    required: true
  kill_wait_s:
    description: Seconds after the SIGKILL before the stop is declared failed.
    type: float
    default: 10
author: serving-rollout
"""

EXAMPLES = r"""
- name: Stop the candidate within 180 s, whatever it does with SIGTERM
  engine_stop:
    unit: vllm-candidate.service
    deadline_s: 180
"""

RETURN = r"""
stopped:
  description: Whether the unit is inactive or failed now.
  type: bool
  sample: true
  returned: always
escalated:
  description: Whether the stop needed the SIGKILL (the engine ignored its stop for deadline_s).
  type: bool
  sample: false
  returned: always
how:
  description: One line saying how the unit stopped.
  type: str
  sample: systemctl stop
  returned: always
elapsed_s:
  description: Seconds the stop took.
  type: float
  sample: 2.1
  returned: always
remaining:
  description: The unit's processes still alive when the stop failed (pid and command, redacted).
  type: list
  sample: []
  returned: on failure
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import runner
from ansible.module_utils.unit_stop import GONE, active_state, stop, unit_processes


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "deadline_s": {"type": "float", "required": True},
            "kill_wait_s": {"type": "float", "default": 10},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["deadline_s"] <= 0 or p["kill_wait_s"] < 0:
        module.fail_json(msg=f"deadline_s must be positive and kill_wait_s not negative, got {p['deadline_s']} "
                             f"and {p['kill_wait_s']}")
    if module.check_mode:
        state = active_state(runner(module), p["unit"])
        module.exit_json(changed=state not in GONE, stopped=state in GONE, escalated=False,
                         elapsed_s=0.0, how=f"check mode: {p['unit']} is {state}")
    result = stop(p["unit"], p["deadline_s"], runner(module), kill_wait_s=p["kill_wait_s"])
    if not result["stopped"]:
        module.fail_json(msg=result["how"], remaining=unit_processes(runner(module), p["unit"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
